"""`sorted_greedy` assigns sequences exactly as the textbook LPT rule with a heap does (pop the least-loaded rank, push
it back with the sequence's work), ties included, and `pack_micro_batches` packs exactly as the textbook first fit
decreasing does, whatever shortcuts they take."""
from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.dp_balance import pack_micro_batches, sorted_greedy, work
from tests.test_sim_parts import first_fit_decreasing


def textbook_lpt(lengths: list[int], ranks: int) -> list[list[int]]:
    heap = [(0.0, rank) for rank in range(ranks)]
    out: list[list[int]] = [[] for _ in range(ranks)]
    for index in sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True):
        load, rank = heapq.heappop(heap)
        out[rank].append(index)
        heapq.heappush(heap, (load + work(lengths[index]), rank))
    return out


# Few distinct lengths, so equal lengths and equal loads (ties between ranks) are common.
@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1, 7, 512, 4096, 16_000, 16_384]) | st.integers(1, 70_000), max_size=300),
       st.integers(min_value=1, max_value=70))
def test_sorted_greedy_is_the_textbook_lpt_rule(lengths, ranks):
    assert sorted_greedy(lengths, ranks) == textbook_lpt(lengths, ranks)


def test_equal_lengths_go_round_the_ranks_in_rank_order():
    assert sorted_greedy([5] * 7, 3) == [[0, 3, 6], [1, 4], [2, 5]]


# Sequences longer than the capacity, exactly at it, one short of it, and empty ones: the edges of packing.
@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=40_000).flatmap(lambda capacity: st.tuples(
    st.just(capacity), st.lists(st.sampled_from([0, 1, capacity - 1, capacity, capacity + 1]) | st.integers(0, 3 * capacity),
                                max_size=120))))
def test_packing_is_the_textbook_first_fit_decreasing(case):
    capacity, lengths = case
    assert pack_micro_batches(lengths, capacity) == first_fit_decreasing(lengths, capacity)
