"""Prefill runs: a long prefill's chunks over a fixed decode batch, planned in closed form.

A sequence whose context is longer than an iteration's token budget prefills over several iterations — a long
prompt, or a preempted sequence readmitted with everything it generated (recompute preemption). While its chunk
takes the whole budget left by the decodes, its boundaries change nothing but their counters: the decode batch is
fixed (no turn ends), nothing is preempted (the cache has room for the decodes' growth), and nothing is admitted
(no budget is left). `plan_prefill_run` finds those boundaries on a copy of the few quantities that decide them —
the batch's size and context, the iteration of its first turn end, the KV tokens used, the chunk's prefix — and
prices each iteration with the same call and float operations as the step-by-step path, so the run's boundary times
are that path's to the bit.

The engine then sleeps once until the run's last iteration ends and books each boundary in between (counters, a
sample, the busy span going on) once simulated time has passed it, like a preemption chain's
(`rlsim.sim.engine.preemption_chain`): when the run ends, when a pause cuts it short, or when anything reads or
changes the engine first (`RolloutEngine.settle`). Events per rollout then do not grow with its context: ×4 longer
responses re-prefill in ×4 more chunks, not ×4 more events.
"""
from __future__ import annotations

from rlsim.costs.rollout import PrefillChunk
from rlsim.sim.engine.decode_batch import DecodeBatch, IterationCosts
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.planned import PlannedBoundaries
from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import Rollout


class PrefillRun(PlannedBoundaries[float]):
    """Planned boundaries (their times, in order) between the iterations of one long prefill, of which the first
    `booked` are booked; the run's last iteration ends at `end`. Every iteration but the last prefills `chunk` (a
    plan of one chunk taking the whole budget); the last prefills `last`, the prefill's last chunk or another whole
    one."""

    __slots__ = ("chunk", "last")

    def __init__(self, boundaries: list[float], end: float, chunk: list[tuple[Slot, int]],
                 last: list[tuple[Slot, int]]):
        super().__init__(boundaries, boundaries, end)
        self.chunk = chunk
        self.last = last

    def cut(self) -> float:
        """A wake-up cut the run short after the boundaries booked: the iteration in flight is its last; when it
        ends."""
        boundaries, booked = self.boundaries, self.booked
        if booked < len(boundaries):
            self.end = boundaries[booked]
            self.last = self.chunk
            del boundaries[booked:]
        return self.end


def plan_prefill_run(now: float, seconds: float, plan: list[tuple[Slot, int]], batch: DecodeBatch, kv: KVLedger,
                     alone: bool, head: Rollout | None, slots_free: bool, costs: IterationCosts) -> PrefillRun | None:
    """The run that the iteration begun at `now` (priced `seconds`, prefilling `plan`) opens, or None when its
    boundary is not a pure one. What decides whether the prefill's last chunk admits anything beside it: `alone`,
    whether no other sequence waits for its prefill; `head`, the queue's head; `slots_free`, whether a sequence slot
    is free (`max_num_seqs`). The engine's state is read, never changed."""
    if len(plan) != 1:
        return None
    slot, budget = plan[0]
    left = slot.prefill_left
    if budget >= left:
        return None  # the chunk ends the prefill
    size, context, used, capacity = batch.size, batch.context, kv.used, kv.capacity
    iteration, computed = batch.iteration, slot.computed
    first_finish = batch.first_finish()
    boundaries: list[float] = []
    end = now + seconds  # as SimPy schedules the iteration's timeout
    while True:
        # The iteration ending at `end` books its tokens ...
        iteration += 1
        context += size
        used += size
        left -= budget
        computed += budget
        # ... and the boundary after it is pure when no turn ends there, the next decodes fit without a preemption
        # and nothing is admitted: the chunk takes the whole budget, or it is the last and the queue's head does not
        # fit beside it (`Scheduler.admissible`). A queue without a head ends the run there: a rollout submitted
        # meanwhile could be admitted, and would have to cut the run short.
        if first_finish <= iteration or used + size > capacity:
            break
        if left < budget and not (alone and head is not None and (not slots_free or not kv.fits(head, size, used))):
            break
        boundaries.append(end)
        chunk = min(left, budget)
        end = end + costs.iteration_seconds(size, context, (PrefillChunk(chunk, computed, chunk == left),))
        if chunk == left:
            return PrefillRun(boundaries, end, plan, [(slot, chunk)])  # that iteration ends the prefill
    if not boundaries:
        return None
    return PrefillRun(boundaries, end, plan, plan)
