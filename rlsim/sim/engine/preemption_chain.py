"""Preemption chains: the boundaries a full KV cache forces on a fixed decode batch, planned in closed form.

Once a fast decode stretch ends because the KV cache is full, what follows until the batch's next turn end is
determined: the boundary preempts the most recently admitted sequences until the next iteration's tokens fit, admits
nothing (vLLM admits nothing in a boundary that preempted, and the sequence just preempted heads the queue without
fitting), and the smaller batch decodes until the cache fills again. `plan_chain` walks those boundaries on a copy of
the few quantities that decide them — batch size, its context, KV tokens used, the finish iterations, the victims'
contexts and their groups' shared prompts — computing each stretch's iterations and seconds with the same calls and
float operations as the step-by-step path, so its boundary times are that path's to the bit.

The engine then sleeps once until the chain's last stretch ends, and books each planned boundary (with the engine's
own boundary code, so victims, counters, samples and busy spans are the step-by-step ones) once simulated time has
passed it: when the chain ends, when a wake-up cuts it short, or when anything reads or changes the engine before
then (`RolloutEngine.settle`).

A boundary is part of a chain only when it is nothing but a preemption: no turn ends there, every victim is a
single-turn sequence that is decoding, some sequence keeps running, and the queue's head (the last victim) would
not fit at the boundary after (else the fast mode steps one iteration to reach it). The first boundary that is not
ends the chain, and the engine's ordinary loop takes it.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterator

from rlsim.sim.engine.decode_batch import DecodeBatch, IterationCosts
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.planned import PlannedBoundaries
from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import MultiTurnRollout, Rollout


class Boundary:
    """A planned chain boundary: at time `at`, `victims` are preempted (latest admitted first) and the batch left
    decodes `k` iterations in `seconds` until the next boundary or the chain's end."""

    __slots__ = ("at", "victims", "k", "seconds")

    def __init__(self, at: float, victims: list[Slot], k: int, seconds: float):
        self.at = at
        self.victims = victims
        self.k = k
        self.seconds = seconds


class PreemptionChain(PlannedBoundaries[Boundary]):
    """Planned preemption `boundaries` (in time order), of which the first `booked` are booked; the chain's last
    stretch ends at `end`."""

    __slots__ = ()

    def __init__(self, boundaries: list[Boundary], end: float):
        super().__init__(boundaries, [boundary.at for boundary in boundaries], end)


class _Victims:
    """The running sequences a chain preempts, latest admitted first, with what leaving frees: a view of the cache
    that leaves the engine as it is."""

    __slots__ = ("kv", "_latest", "_departed", "evicted")

    def __init__(self, kv: KVLedger, running: dict[Rollout, Slot]):
        self.kv = kv
        self._latest: Iterator[Slot] = reversed(running.values())
        self._departed: dict[int, int] = {}  # group -> its sequences preempted so far
        self.evicted: set[Slot] = set()

    def next(self) -> Slot | None:
        """The next victim, or None when it is not one a chain books (prefilling, or a multi-turn trajectory whose
        preemption depends on its tool calls)."""
        slot = next(self._latest)
        return None if slot.prefill_left or isinstance(slot.rollout, MultiTurnRollout) else slot

    def leave(self, slot: Slot, context: int) -> int:
        """The victim leaves holding `context` tokens: the KV tokens freed (its own, and its group's prompt when it
        was the group's last here)."""
        self.evicted.add(slot)
        group = slot.rollout.group
        departed = self._departed[group] = self._departed.get(group, 0) + 1
        return self.kv.freed_by_drop(slot, context, departed - 1)

    def shares_prompt(self, slot: Slot) -> bool:
        """Whether the victim's group prompt is still cached after the departures so far."""
        return self.kv.prompt_still_held(slot.rollout.group, self._departed.get(slot.rollout.group, 0))


def plan_chain(now: float, batch: DecodeBatch, kv: KVLedger, running: dict[Rollout, Slot], max_num_seqs: int,
               max_num_batched_tokens: int, costs: IterationCosts) -> PreemptionChain | None:
    """The chain that the stretch just begun at `now` opens, or None when that stretch ends in a turn end or its
    boundary is not a pure preemption. The engine's state is read, never changed."""
    stretch = batch.stretch
    assert stretch is not None
    finishes = batch.pending_finishes()
    size, context, iteration, used, capacity = batch.size, batch.context, batch.iteration, kv.used, kv.capacity
    k, seconds = stretch.k, stretch.seconds
    victims = _Victims(kv, running)
    live = len(running)
    boundaries: list[Boundary] = []
    while True:
        end = now + seconds  # as SimPy schedules the stretch's timeout
        iteration += k
        if _first_finish(finishes, victims.evicted) <= iteration:
            break  # a turn ends at this boundary
        grown = k * size
        context += grown
        used += grown
        preempted: list[Slot] = []
        head_tokens = 0
        while live and used + size > capacity:
            slot = victims.next()
            if slot is None:
                break
            tokens = slot.rollout.prompt_tokens + slot.start_generated + iteration - slot.start_iteration
            size -= 1
            live -= 1
            context -= tokens - 1
            used -= victims.leave(slot, tokens)
            preempted.append(slot)
            head_tokens = tokens
        if (not preempted or not live or used + size > capacity
                or _head_fits(victims, preempted[-1], head_tokens, live, size, used, capacity, max_num_seqs,
                              max_num_batched_tokens)):
            break  # not a pure preemption, or the fast mode steps one iteration here to admit the head
        now = end
        k = min(_first_finish(finishes, victims.evicted) - iteration, (capacity - used) // size)
        seconds = costs.decode_k_iterations_seconds(size, context, k)
        boundaries.append(Boundary(end, preempted, k, seconds))
    if not boundaries:
        return None
    return PreemptionChain(boundaries, end)


def _first_finish(finishes: list[tuple[int, int, Slot]], evicted: set[Slot]) -> int:
    """The earliest turn end among the sequences still decoding (stale entries and victims dropped from this copy
    of the finish heap)."""
    while not finishes[0][2].live or finishes[0][2] in evicted:
        heapq.heappop(finishes)
    return finishes[0][0]


def _head_fits(victims: _Victims, head: Slot, tokens: int, live: int, size: int, used: int, capacity: int,
               max_num_seqs: int, max_num_batched_tokens: int) -> bool:
    """`Scheduler.admissible(head, growth=size)` after the boundary: whether the queue's head, the last victim
    (preempted holding `tokens`), would be admitted at the boundary after the next iteration."""
    prompt = head.rollout.prompt_tokens
    need = tokens - prompt + 1 + (0 if victims.shares_prompt(head) else prompt)
    return live < max_num_seqs and size < max_num_batched_tokens and used + 2 * size + need <= capacity
