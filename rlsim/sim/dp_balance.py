"""Assigning a batch's sequences to data-parallel ranks, and packing each rank's share into micro-batches.

Policies are registered under the names the scenario uses (`schedule.dp_balance`). Each takes sequence lengths and a
rank count and returns, per rank, the indices of its sequences. The slowest rank sets the pace, so the policy decides
how much of the step the others spend at the barrier (RL in the Wild's DP imbalance).
"""
from __future__ import annotations

import bisect
import heapq
import operator
from collections.abc import Callable, Sequence

import numpy as np
from librt.vecs import append, vec
from mypy_extensions import i64

from rlsim import registry
from rlsim.registry import Registry

Assignment = list[list[int]]
DPBalancer = Callable[[Sequence[int], int], Assignment]
DP_BALANCERS: Registry[DPBalancer] = registry.DP_BALANCERS
register_dp_balancer = DP_BALANCERS.register


def work(length: int) -> float:
    """Relative cost of training one sequence: linear GEMM work plus the causal attention term that grows with length²."""
    return length + length * length / ATTENTION_EQUIVALENT_TOKENS


# Where attention work equals GEMM work for a 7B-class model: 4·L·h·s² vs 24·L·h²·s per sequence (arXiv 2104.04473's
# FLOP count), so s² / s = 6·h ≈ 6·3584 ≈ 21k tokens. A rough constant is enough: it only orders sequences.
ATTENTION_EQUIVALENT_TOKENS = 21_504.0


@register_dp_balancer("none")
def in_order(lengths: Sequence[int], ranks: int) -> Assignment:
    """Deal sequences to ranks in arrival order, as a plain distributed sampler does."""
    return [list(range(rank, len(lengths), ranks)) for rank in range(ranks)]


@register_dp_balancer("sorted_greedy")
def sorted_greedy(lengths: Sequence[int], ranks: int) -> Assignment:
    """Longest first, each to the least-loaded rank (LPT scheduling; within 4/3 of optimal); ties go to the lower rank."""
    out: Assignment = [[] for _ in range(ranks)]
    # Descending length, ties in index order: a stable argsort of the negated lengths (sorted(..., reverse=True) is
    # stable too, but calls a key function per sequence: a step splits its batch several times, 8,192 sequences each).
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable").tolist()
    # A binary heap of the ranks by (load, rank), in machine numbers: each sequence goes to the root, whose load then
    # grows, so it sifts down (no two entries tie: each holds its own rank).
    loads = vec[float]()
    heap = vec[i64]()
    for rank in range(ranks):
        loads = append(loads, 0.0)
        heap = append(heap, rank)
    for index in order:
        rank = heap[0]
        out[rank].append(index)
        load = loads[rank] + work(lengths[index])
        loads[rank] = load
        at: i64 = 0
        while True:
            child = 2 * at + 1
            if child >= ranks:
                break
            other = heap[child]
            if child + 1 < ranks:
                right = heap[child + 1]
                if loads[right] < loads[other] or (loads[right] == loads[other] and right < other):
                    child, other = child + 1, right
            if loads[other] < load or (loads[other] == load and other < rank):
                heap[at] = other
                at = child
            else:
                break
        heap[at] = rank
    return out


@register_dp_balancer("karmarkar_karp")
def karmarkar_karp(lengths: Sequence[int], ranks: int) -> Assignment:
    """The k-way largest differencing method (the partitioner verl's seqlen balancing uses).

    Every sequence starts as a k-tuple of partial partitions; repeatedly merge the two tuples whose spread is largest,
    pairing the heaviest part of one with the lightest of the other.
    """
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []
    for index in range(len(lengths)):
        parts = [(work(lengths[index]), [index])] + [(0.0, []) for _ in range(ranks - 1)]
        heapq.heappush(heap, (-_spread(parts), index, parts))
    counter = len(lengths)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        a.sort(key=lambda p: p[0])
        b.sort(key=lambda p: -p[0])
        merged = [(a[i][0] + b[i][0], a[i][1] + b[i][1]) for i in range(ranks)]
        heapq.heappush(heap, (-_spread(merged), counter, merged))
        counter += 1
    parts = heap[0][2] if heap else [(0.0, []) for _ in range(ranks)]
    parts.sort(key=lambda p: (-p[0], p[1][:1]))
    return [sorted(indices) for _, indices in parts]


def _spread(parts: list[tuple[float, list[int]]]) -> float:
    loads = [load for load, _ in parts]
    return max(loads) - min(loads)


def pack_micro_batches(lengths: Sequence[int], capacity_tokens: int) -> list[list[int]]:
    """First-fit decreasing into micro-batches of at most `capacity_tokens` (a longer sequence gets one of its own).

    The first bin with room is found in O(log bins) by descending a max-tree of the bins' free room, rather than by
    scanning every bin: a rank packs thousands of sequences into hundreds of micro-batches at every update. Sequences
    longer than the capacity come first and each opens a bin with no room, which nothing joins: they skip the tree."""
    ordered = sorted(lengths, reverse=True)
    alone: i64 = bisect.bisect_left(ordered, -capacity_tokens, key=operator.neg)  # how many exceed the capacity
    bins: list[list[int]] = [[length] for length in ordered[:alone]]
    leaves: i64 = 1
    while leaves < len(ordered) - alone:
        leaves *= 2
    # room[1] is the most free room of any bin; a leaf without a bin never fits (-1). Machine numbers: a list would
    # box every room it stores (compiled, 3 % of a production step's instructions).
    room = vec[i64]()
    for _ in range(2 * leaves):
        room = append(room, -1)
    to_bin = alone - leaves  # tree node n (a leaf) is bins[n + to_bin]
    for length in ordered[alone:]:
        if room[1] >= length:
            node: i64 = 1
            while node < leaves:  # the leftmost subtree with room, down to its bin
                node = 2 * node if room[2 * node] >= length else 2 * node + 1
            bins[node + to_bin].append(length)
            room[node] -= length
        else:
            node = len(bins) - to_bin
            bins.append([length])
            room[node] = capacity_tokens - length
        node //= 2
        while node:
            left, right = room[2 * node], room[2 * node + 1]
            room[node] = left if left >= right else right
            node //= 2
    return bins
