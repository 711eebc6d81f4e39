"""Prefill runs: the chunks of long prefills over a decode batch that only grows, planned in closed form.

A sequence whose context is longer than an iteration's token budget prefills over several iterations — a long
prompt, or a preempted sequence readmitted with everything it generated (recompute preemption). Under memory
pressure several readmitted sequences prefill side by side: one's last chunk and the next one's first share an
iteration, and the budget stays full. While it does, the boundaries change nothing the scheduler has to decide: no
turn ends, nothing is preempted (the cache has room for the decodes' growth), and nothing is admitted (no budget is
left, or the queue's head does not fit). A prefill that completes there only moves its sequence into the decode batch,
which is predictable: the batch grows by one and the budget shrinks by one. `plan_prefill_run` finds those boundaries
on copies of the few quantities that decide them — the batch's size and context, the iteration of its first turn end,
the KV tokens used, each prefilling sequence's tokens left and computed — replaying the scheduler's chunk allocation
(`Scheduler.plan`: the running prefills in admission order, each as much of the budget as it needs), and prices each
iteration with the same call and float operations as the step-by-step path, so the run's boundary times are that
path's to the bit.

The engine then sleeps once until the run's last iteration ends and books each boundary in between (counters, the
prefills completed joining the batch, a sample, the busy span going on) once simulated time has passed it, like a
preemption chain's (`rlsim.sim.engine.preemption_chain`): when the run ends, when a pause cuts it short, or when
anything reads or changes the engine first (`RolloutEngine.settle`). Events per rollout then do not grow with its
context: ×4 longer responses re-prefill in ×4 more chunks, not ×4 more events.
"""
from __future__ import annotations

from rlsim.costs.rollout import PrefillChunk
from rlsim.sim.engine.decode_batch import DecodeBatch, IterationCosts
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.planned import PlannedBoundaries
from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import Rollout

Plan = list[tuple[Slot, int]]  # an iteration's prefill chunks: (slot, tokens), as `Scheduler.plan` returns them


class PrefillRun(PlannedBoundaries[tuple[float, Plan]]):
    """Planned boundaries between the iterations of long prefills, in order, each as (its time, the plan of the
    iteration ending there), of which the first `booked` are booked; the run's last iteration prefills `last` and
    ends at `end`."""

    __slots__ = ("last",)

    def __init__(self, plans: list[Plan], times: list[float], end: float):
        super().__init__(list(zip(times, plans, strict=False)), times, end)
        self.last = plans[-1]

    def cut(self) -> float:
        """A wake-up cut the run short after the boundaries booked: the iteration in flight is its last; when it
        ends."""
        boundaries, times, booked = self.boundaries, self.times, self.booked
        if booked < len(times):
            self.end, self.last = boundaries[booked]
            del boundaries[booked:]
            del times[booked:]
        return self.end


def plan_prefill_run(now: float, seconds: float, plan: Plan, prefilling: list[Slot], batch: DecodeBatch,
                     kv: KVLedger, max_num_batched_tokens: int, head: Rollout | None, slots_free: bool,
                     costs: IterationCosts) -> PrefillRun | None:
    """The run that the iteration begun at `now` (priced `seconds`, prefilling `plan`) opens, or None when its
    boundary is not a pure one. `prefilling`: the scheduler's prefilling slots, in admission order, of which the plan
    prefills the first ones. What decides whether a boundary admits anything: `head`, the queue's head;
    `slots_free`, whether a sequence slot is free (`max_num_seqs`; no sequence leaves within a run). The engine's
    state is read, never changed."""
    count = len(prefilling)
    size, used = batch.size, kv.used
    if len(plan) == count:
        # The common refusals, before any set-up: the plan prefills every prefilling slot, all but the last to the
        # end, so the boundary after it either sees every prefill complete (it admits, or the batch decodes alone),
        # or gives the last one's next chunk with budget to spare and admits the queue's head beside it.
        last, last_tokens = plan[-1]
        last_left = last.prefill_left - last_tokens
        joined = count - 1
        if not last_left or (last_left < max_num_batched_tokens - size - joined and head is not None and slots_free
                             and kv.fits(head, size + joined, used + size)):
            return None
    context, capacity = batch.context, kv.capacity
    iteration = batch.iteration
    first_finish = batch.first_finish()
    # The chunks go to the prefilling slots in order, so at most one slot is part-way through its prefill in the
    # run: the frontier, prefilling[frontier], with `left` tokens still to prefill after `computed`. The slots after
    # it are as the engine has them.
    frontier = 0
    first = prefilling[0]  # the plan's first slot
    left, computed = first.prefill_left, first.computed
    plans = [plan]
    times: list[float] = []
    end = now + seconds  # as SimPy schedules the iteration's timeout
    while True:
        # The iteration ending at `end` books its tokens; its completed prefills sample a token and join the batch
        # (`Scheduler.prefilled`, then `SequenceLifecycle.first_token`, in plan order) ...
        iteration += 1
        context += size
        used += size
        for slot, tokens in plan:
            left -= tokens
            computed += tokens
            if left:
                break  # the plan's last chunk: its slot stays the frontier
            frontier += 1
            rollout = slot.rollout
            remaining = rollout.remaining - 1
            if remaining <= 0:
                return _run(plans, times, end)  # the token sampled ends its turn
            size += 1
            context += rollout.context_tokens  # its context once the token is sampled, less that token
            if iteration + remaining < first_finish:
                first_finish = iteration + remaining
            if frontier < count:
                following = prefilling[frontier]
                left, computed = following.prefill_left, following.computed
        # ... and the boundary after it is pure when no turn ends there, the next decodes fit without a preemption
        # and nothing is admitted: the prefills take the whole budget, or the queue's head does not fit beside them
        # (`Scheduler.admissible`). A queue without a head ends the run there: a rollout submitted meanwhile could
        # be admitted, and would have to cut the run short.
        if first_finish <= iteration or used + size > capacity or frontier == count:
            return _run(plans, times, end)
        budget = max_num_batched_tokens - size
        if budget <= 0:
            return _run(plans, times, end)  # the decodes take the whole budget: the batch decodes alone
        if left > budget:
            # The common case: the frontier's next chunk takes the whole budget, so nothing is admitted.
            plan = [(prefilling[frontier], budget)]
            chunks = [PrefillChunk(budget, computed, False)]
        else:
            plan = [(prefilling[frontier], left)]
            chunks = [PrefillChunk(left, computed, True)]
            budget -= left
            index = frontier + 1
            while budget > 0 and index < count:
                slot = prefilling[index]
                slot_left = slot.prefill_left
                tokens = slot_left if slot_left < budget else budget
                plan.append((slot, tokens))
                chunks.append(PrefillChunk(tokens, slot.computed, tokens == slot_left))
                budget -= tokens
                index += 1
            if budget > 0 and (head is None or (slots_free and kv.fits(head, size, used))):
                return _run(plans, times, end)
        times.append(end)
        plans.append(plan)
        end = end + costs.iteration_seconds(size, context, chunks)


def _run(plans: list[Plan], times: list[float], end: float) -> PrefillRun | None:
    """The run whose last iteration ends at `end`, or None when it has no boundary to book."""
    return PrefillRun(plans, times, end) if times else None
