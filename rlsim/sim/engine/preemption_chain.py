"""Preemption chains: the boundaries a full KV cache forces on a fixed decode batch, planned in closed form.

Once a fast decode stretch ends because the KV cache is full, what follows until the batch's next turn end is
determined: the boundary preempts the most recently admitted sequences until the next iteration's tokens fit, admits
nothing (vLLM admits nothing in a boundary that preempted, and the sequence just preempted heads the queue without
fitting), and the smaller batch decodes until the cache fills again. `plan_chain` walks those boundaries on a copy of
the few quantities that decide them — batch size, its context, KV tokens used, the finish iterations, the victims'
contexts and their groups' shared prompts — computing each stretch's iterations and seconds with the same calls and
float operations as the step-by-step path, so its boundary times are that path's to the bit.

The engine then sleeps once until the chain's last stretch ends, and books the planned boundaries once simulated time
has passed them: when the chain ends, when a wake-up cuts it short, or when anything reads or changes the engine before
then (`RolloutEngine.settle`). `book_boundaries` books those due in one pass, changing the engine's parts as the
step-by-step path's boundary code does (the stretch's iterations, the cache's growth, the victims' preemption), so
victims, counters and samples are that path's; the busy spans are the telemetry's (`EngineTelemetry.restarted`).

A boundary is part of a chain only when it is nothing but a preemption: no turn ends there, every victim is a
single-turn sequence that is decoding, some sequence keeps running, and the queue's head (the last victim) would
not fit at the boundary after (else the fast mode steps one iteration to reach it). The first boundary that is not
ends the chain, and the engine's ordinary loop takes it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from librt.vecs import append, vec
from mypy_extensions import i64

from rlsim.costs.rollout import IterationCosts
from rlsim.events.tables import SampleColumns
from rlsim.sim.engine.decode_batch import DecodeBatch, decode_read, pop_finish
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.planned import PlannedBoundaries
from rlsim.sim.engine.running import RunningSlots
from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import MultiTurnRollout

if TYPE_CHECKING:
    from rlsim.sim.engine.scheduler import Scheduler


class PreemptionChain(PlannedBoundaries):
    """Planned preemption boundaries at `times` (in time order), of which the first `booked` are booked; the chain's
    last stretch ends at `end`. At boundary i, `victims[j]` for j from `victim_ends[i - 1]` (0 for the first) to
    `victim_ends[i]` are preempted (latest admitted first), and the batch left decodes `iterations[i]` iterations in
    `seconds[i]` until the next boundary or the chain's end. Columns of machine numbers rather than an object a
    boundary: a ×4-length step plans tens of thousands."""

    __slots__ = ("victims", "victim_ends", "iterations", "seconds")

    def __init__(self, times: vec[float], end: float, victims: list[Slot], victim_ends: vec[i64],
                 iterations: vec[i64], seconds: vec[float]):
        super().__init__(times, end)
        self.victims = victims
        self.victim_ends = victim_ends
        self.iterations = iterations
        self.seconds = seconds


def plan_chain(now: float, batch: DecodeBatch, kv: KVLedger, running: RunningSlots, max_num_seqs: int,
               max_num_batched_tokens: int, costs: IterationCosts) -> PreemptionChain | None:
    """The chain that the stretch just begun at `now` opens, or None when that stretch ends in a turn end or its
    boundary is not a pure preemption. The engine's state is read, never changed (but for the plan's marks below).

    One pass over the boundaries, each victim visited once: what a victim frees, and whether the queue's head (the last
    victim) still finds its group's prompt cached, come from the running count of its group's departures. The plan
    counts those on the groups' prompt entries and marks its victims' slots, each by its number (`KVLedger.plan_ahead`:
    marks only plans read), where sets and dicts of them cost lookups by hash at each victim."""
    stretch = batch.stretch
    assert stretch is not None
    size, context, iteration, used, capacity = batch.size, batch.context, batch.iteration, kv.used, kv.capacity
    k, seconds = stretch.k, stretch.seconds
    first = batch.first_finish()  # pops nothing: `begin_stretch` just dropped the stale entries at the heap's head
    if first <= iteration + k:
        return None  # the stretch ends in a turn end (the usual case): no copy of the finish heap needed
    finishes = batch.pending_finishes()
    sharing = kv.sharing
    # The victims, latest admitted first: the running slots' list from its end, counting down past the places
    # emptied (read in place: copying the batch's slots cost more than the few victims a chain takes).
    latest = running.slots
    victim: i64 = len(latest) - 1
    chain = kv.plan_ahead()
    live: i64 = len(running)
    times, victim_ends, iterations, stretch_seconds = vec[float](), vec[i64](), vec[i64](), vec[float]()
    victims: list[Slot] = []
    while True:
        end = now + seconds  # as SimPy schedules the stretch's timeout
        iteration += k
        if first <= iteration:
            break  # a turn ends at this boundary
        grown = k * size
        context += grown
        used += grown
        preempted: i64 = len(victims)
        # The queue's head after the boundary, the last victim: its context and whether its group's prompt stays.
        head_tokens: i64 = 0
        head_prompt: i64 = 0
        head_shares = False
        while live and used + size > capacity:
            slot = latest[victim]
            victim -= 1
            while slot is None:
                slot = latest[victim]
                victim -= 1
            rollout = slot.rollout
            if slot.prefill_left or isinstance(rollout, MultiTurnRollout):
                break  # prefilling, or a trajectory whose preemption depends on its tool calls: not a chain's victim
            head_prompt = rollout.prompt_tokens
            head_tokens = head_prompt + slot.start_generated + iteration - slot.start_iteration
            size -= 1
            live -= 1
            context -= head_tokens - 1
            used -= slot.own_prompt + head_tokens - head_prompt  # `KVLedger.drop`'s, plus the prompt below
            head_shares = False
            if sharing:
                shared = slot.prompt
                assert shared is not None
                if shared.departed_by != chain:  # its group's first victim in the chain
                    shared.departed_by = chain
                    shared.departed = 0
                shared.departed += 1
                head_shares = shared.holders > shared.departed
                if not head_shares:
                    used -= shared.tokens  # the group's last sequence here frees its prompt
            slot.preempted_by = chain
            victims.append(slot)
        if preempted == len(victims) or not live or used + size > capacity:
            break  # not a pure preemption
        # `Scheduler.admissible(head, growth=size)` at the boundary after the next iteration: the fast mode steps one
        # iteration to admit it there.
        need = head_tokens - head_prompt + 1 + (0 if head_shares else head_prompt)
        if live < max_num_seqs and size < max_num_batched_tokens and used + 2 * size + need <= capacity:
            break
        now = end
        first = _first_finish(finishes, chain)
        k, room = first - iteration, (capacity - used) // size
        if room < k:  # min() by comparison: a builtin call costs more than the rest of the line
            k = room
        seconds = costs.decode_k_iterations_seconds(size, float(context), k)
        if now + seconds <= now:
            break  # a stretch too short to move the clock: the step-by-step path takes it (spans need time to pass)
        times = append(times, end)
        victim_ends = append(victim_ends, len(victims))
        iterations = append(iterations, k)
        stretch_seconds = append(stretch_seconds, seconds)
    if not times:
        return None
    del victims[victim_ends[len(victim_ends) - 1]:]  # those of the boundary that ended the chain
    return PreemptionChain(times, end, victims, victim_ends, iterations, stretch_seconds)


def _first_finish(finishes: list[Slot], chain: i64) -> i64:
    """The earliest turn end among the sequences still decoding (stale entries and the victims of the chain numbered
    `chain` dropped from this copy of the finish heap)."""
    while not finishes[0].live or finishes[0].preempted_by == chain:
        pop_finish(finishes)
    return finishes[0].finish


def book_boundaries(chain: PreemptionChain, first: int, stop: int, iterations: i64, batch: DecodeBatch,
                    kv: KVLedger, scheduler: Scheduler, samples: SampleColumns, engine: int) -> None:
    """Book the chain's planned boundaries `first` to `stop` (excluded; the first ending a stretch of `iterations`)
    as the step-by-step path books each at its time — `RolloutEngine._end_stretch`, then `Scheduler.make_room`
    preempting the boundary's victims — in one pass: the stretch's iterations are booked and the cache grows (released
    contexts evicted for the next iteration's tokens), and each victim (a decoding single-turn sequence, latest
    admitted first) leaves the batch up to date and its KV freed, back to the front of the queue (first come, first
    served; no probe observes it). The batch's counters and the scheduler's totals run as local sums, written back
    once. The engine (coded `engine`) is sampled at each boundary, into `samples`."""
    running = scheduler.running
    waiting = scheduler.waiting
    size, context, iteration = batch.size, batch.context, batch.iteration
    decode_iterations, read = batch.decode_iterations, batch.decode_read
    generated: i64 = 0
    queued: i64 = 0
    times, victims, victim_ends, planned_iterations = chain.times, chain.victims, chain.victim_ends, chain.iterations
    taken: i64 = victim_ends[first - 1] if first else 0  # victims[taken] is the next to preempt
    start = taken
    for index in range(first, stop):
        iteration += iterations
        decode_iterations += iterations
        read += decode_read(size, context, iterations)
        grown = iterations * size
        context += grown
        generated += grown
        kv.used += grown
        kv.trim(size)  # `_advance`'s trim(0) evicts a prefix of what the boundary's trim(size) evicts
        until = victim_ends[index]
        while taken < until:
            slot = victims[taken]
            taken += 1
            rollout = slot.rollout
            running.remove(slot)
            slot.live = slot.decoding = False
            rollout.generated = slot.start_generated + iteration - slot.start_iteration
            tokens: i64 = rollout.context_tokens
            size -= 1
            context -= tokens - 1
            kv.drop(slot, tokens)
            waiting.appendleft(rollout)
            queued += tokens
            rollout.preemptions += 1
        samples.add(engine, times[index], len(running), len(waiting), kv.used, size, iteration, decode_iterations, read)
        iterations = planned_iterations[index]
    batch.size, batch.context, batch.iteration = size, context, iteration
    batch.decode_iterations, batch.decode_read = decode_iterations, read
    scheduler.generated_total += generated
    scheduler.queued_tokens += queued
    scheduler.preemptions += taken - start
