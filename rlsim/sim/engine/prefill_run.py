"""Prefill runs: the chunks of long prefills over a decode batch that only grows, planned in closed form.

A sequence whose context is longer than an iteration's token budget prefills over several iterations — a long
prompt, or a preempted sequence readmitted with everything it generated (recompute preemption). Under memory
pressure several readmitted sequences prefill side by side: one's last chunk and the next one's first share an
iteration, and the queue's heads are admitted into the budget a last chunk leaves. While this goes on, the boundaries
are predictable: no turn ends and nothing is preempted (the cache has room for the decodes' growth); a prefill that
completes only moves its sequence into the decode batch (the batch grows by one and the budget shrinks by one); and
the admissions follow from the queue, first come, first served — each head while a sequence slot is free, budget is
left and its context fits the cache beside what runs and what was admitted before it (its group's prompt cached when
a running sequence, or one admitted earlier in the run, holds it). `plan_prefill_run` finds those boundaries on copies
of the few quantities that decide them — the batch's size and context, the iteration of its first turn end, the KV
tokens used, the sequences running, each prefilling sequence's tokens left and computed, the groups whose prompts are
held — replaying the scheduler's chunk allocation and admissions (`Scheduler.plan`: the running prefills in admission
order, each as much of the budget as it needs, then the queue's heads), and prices each iteration with the same call
and float operations as the step-by-step path, so the run's boundary times are that path's to the bit. A run plans
no admission where replaying one exactly would take more (`Scheduler.plannable_admission`: a ranked queue,
past-future admission, KV fetched from elsewhere, released contexts an admission could revive or evict; a multi-turn
trajectory at the head): it ends at that boundary instead, and the engine's process admits there.

The engine then sleeps once until the run's last iteration ends and books each boundary in between (counters, the
prefills completed joining the batch, the admissions, a sample, the busy span going on) once simulated time has
passed it, like a preemption chain's (`rlsim.sim.engine.preemption_chain`): when the run ends, when a wake-up cuts
it short, or when anything reads or changes the engine first (`RolloutEngine.settle`). A planned admission is a new
`Slot` the plan holds, admitted into the engine when its boundary is booked (`Scheduler.book_admission`). What
arrives meanwhile queues behind the heads planned, so changes nothing planned: a run ends at the first boundary where
budget is left and the queue, as planned, has no head. What takes rollouts off the queue (a steal, a withdrawal) or
stops admissions (a drain) cuts a run that planned admissions of them after the iteration in flight. Events per
rollout then do not grow with its context: ×4 longer responses re-prefill in ×4 more chunks, not ×4 more events.
"""
from __future__ import annotations

from librt.vecs import append, vec
from mypy_extensions import i64

from rlsim.costs.iteration_work import chunk_pairs
from rlsim.costs.rollout import ChunkFields, IterationCosts
from rlsim.sim.engine.decode_batch import DecodeBatch
from rlsim.sim.engine.kv_ledger import KVLedger, planned_cached_tokens
from rlsim.sim.engine.planned import PlannedBoundaries
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.waiting import WaitingQueue
from rlsim.sim.sequence import MultiTurnRollout

Plan = list[tuple[Slot, int]]  # an iteration's prefill chunks: (slot, tokens), as `Scheduler.plan` returns them


class PrefillRun(PlannedBoundaries):
    """Planned boundaries between the iterations of long prefills, at `times` (in order), of which the first `booked`
    are booked; the run's last iteration ends at `end`. Iteration i (the engine's own first, then one after each
    boundary) prefills `tokens[j]` of `slots[j]` for j from `plan_ends[i - 1]` (0 for the first) to `plan_ends[i]`;
    boundary i admits `admitted[j]` for j from `admitted_ends[i - 1]` (0) to `admitted_ends[i]`, the queue's heads
    as new slots. Flat columns rather than a plan and a list of admissions a boundary, the numbers in librt `vec`s
    (machine numbers, no Python object each): a ×4-length step plans tens of thousands of boundaries, and each
    object built for one is allocated, then freed once it is booked."""

    __slots__ = ("slots", "tokens", "plan_ends", "admitted", "admitted_ends")

    def __init__(self, slots: list[Slot], tokens: vec[i64], plan_ends: vec[i64], admitted: list[Slot],
                 admitted_ends: vec[i64], times: vec[float], end: float):
        super().__init__(times, end)
        self.slots = slots
        self.tokens = tokens
        self.plan_ends = plan_ends
        self.admitted = admitted
        self.admitted_ends = admitted_ends

    def last_plan(self) -> Plan:
        """The plan of the run's last iteration, the one ending at `end`."""
        plan_ends = self.plan_ends
        count = len(plan_ends)
        first = plan_ends[count - 2] if count > 1 else 0
        slots, tokens = self.slots, self.tokens
        return [(slots[index], tokens[index]) for index in range(first, len(slots))]

    def cut(self) -> float:
        """A wake-up cut the run short after the boundaries booked: the iteration in flight is its last; when it
        ends. The admissions planned from its end on are dropped: the engine decides there afresh."""
        times, booked = self.times, self.booked
        if booked < len(times):
            self.end = times[booked]
            self.times = times[:booked]
            self.plan_ends = self.plan_ends[:booked + 1]
            chunks = self.plan_ends[booked]
            del self.slots[chunks:]
            self.tokens = self.tokens[:chunks]
            self.admitted_ends = self.admitted_ends[:booked]
            del self.admitted[self.admitted_ends[booked - 1] if booked else 0:]
        return self.end

    def queue_read(self) -> int:
        """How many of the queue's first rollouts the boundaries not yet booked depend on: those they admit and the
        one after, which does not fit or is not there (0 when they admit none: they read the head only to find that
        it does not fit, as `SequenceLifecycle.queued` knows)."""
        booked = self.booked
        planned = len(self.admitted) - (self.admitted_ends[booked - 1] if booked else 0)
        return planned + 1 if planned else 0


def plan_prefill_run(now: float, seconds: float, plan: Plan, prefilling: list[Slot], batch: DecodeBatch,
                     kv: KVLedger, max_num_batched_tokens: i64, waiting: WaitingQueue, running: i64,
                     max_num_seqs: i64, admission: int | None, costs: IterationCosts) -> PrefillRun | None:
    """The run that the iteration begun at `now` (priced `seconds`, prefilling `plan`) opens, or None when its
    boundary is not one it can plan. `prefilling`: the scheduler's prefilling slots, in admission order, of which the
    plan prefills the first ones. What decides the admissions at a boundary: the queue (`waiting`), the `running`
    sequences against `max_num_seqs` (no sequence leaves within a run), and the budget and cache left;
    `admission`: the admission order the next admitted sequence gets, when the run may plan admissions
    (`Scheduler.plannable_admission`), or None to end the run where the queue's head would be admitted. The
    engine's state is read, never changed: a planned admission's `Slot` is new, and the engine's only once booked
    (the run marks the prompt entries of the groups it admits, `KVLedger.plan_holds`, which only a plan reads)."""
    count: i64 = len(prefilling)
    size, used = batch.size, kv.used
    if len(plan) == count:
        # The common refusals, before any set-up: the plan prefills every prefilling slot, all but the last to the
        # end, so the boundary after it either sees every prefill complete (it admits, or the batch decodes alone),
        # or gives the last one's next chunk with budget to spare and admits the queue's head beside it, which only
        # a run that plans admissions goes on through.
        last, last_tokens = plan[-1]
        last_left = last.prefill_left - last_tokens
        joined = count - 1
        if not last_left or (admission is None and last_left < max_num_batched_tokens - size - joined and waiting
                             and running < max_num_seqs and kv.fits(waiting[0], size + joined, used + size)):
            return None
    context, capacity = batch.context, kv.capacity
    iteration = batch.iteration
    first_finish = batch.first_finish()
    # The chunks go to the prefilling slots in order, so at most one slot is part-way through its prefill in the
    # run: the frontier, prefilling[frontier], with `left` tokens still to prefill after `computed`. The slots after
    # it are as the engine has them, or as their planned admission sets them.
    frontier: i64 = 0
    first = prefilling[0]  # the plan's first slot
    left, computed = first.prefill_left, first.computed
    # The run's columns (`PrefillRun`), from the plan of the iteration begun now; `begin`: where the chunks of the
    # iteration ending at `end` begin.
    slots: list[Slot] = []
    chunk_tokens = vec[i64]()
    for slot, planned in plan:
        slots.append(slot)
        chunk_tokens = append(chunk_tokens, planned)
    plan_ends = append(vec[i64](), len(plan))
    admitted: list[Slot] = []
    admitted_ends = vec[i64]()
    times = vec[float]()
    begin: i64 = 0
    queued: i64 = 0  # the queue's rollouts admitted in the run: waiting[queued] is the head at the boundary
    plans_admissions = admission is not None
    order: i64 = 0 if admission is None else admission  # the next planned admission's
    plan_number: i64 = kv.plan_ahead() if plans_admissions else 0  # marks the prompts the run's admissions hold
    end = now + seconds  # as SimPy schedules the iteration's timeout
    while True:
        # The iteration ending at `end` books its tokens; its completed prefills sample a token and join the batch
        # (`Scheduler.prefilled`, then `SequenceLifecycle.first_token`, in plan order) ...
        iteration += 1
        context += size
        used += size
        stop = plan_ends[len(plan_ends) - 1]
        for index in range(begin, stop):
            tokens = chunk_tokens[index]
            left -= tokens
            computed += tokens
            if left:
                break  # the plan's last chunk: its slot stays the frontier
            frontier += 1
            rollout = slots[index].rollout
            remaining = rollout.remaining - 1
            if remaining <= 0:
                return _run(slots, chunk_tokens, plan_ends, admitted, admitted_ends, times, end)  # its turn ends
            size += 1
            context += rollout.context_tokens  # its context once the token is sampled, less that token
            if iteration + remaining < first_finish:
                first_finish = iteration + remaining
            if frontier < count:
                following = prefilling[frontier]
                left, computed = following.prefill_left, following.computed
        begin = stop
        # ... and the boundary after it can be planned when no turn ends there and the next decodes fit without a
        # preemption; the prefills take the budget first, then the queue's heads are admitted in order while a slot,
        # the budget and the cache allow (`Scheduler.plan`, `Scheduler.admissible`). A queue without a head where
        # budget is left ends the run there: a rollout submitted meanwhile could be admitted, and would have to cut
        # the run short.
        if first_finish <= iteration or used + size > capacity or frontier == count:
            return _run(slots, chunk_tokens, plan_ends, admitted, admitted_ends, times, end)
        budget = max_num_batched_tokens - size
        if budget <= 0:  # the decodes take the whole budget: the batch decodes alone
            return _run(slots, chunk_tokens, plan_ends, admitted, admitted_ends, times, end)
        slots.append(prefilling[frontier])
        if left > budget:
            # The common case: the frontier's next chunk takes the whole budget, so nothing is admitted.
            chunk_tokens = append(chunk_tokens, budget)
            seconds = costs.chunk_iteration_seconds(size, float(context), budget, computed, False)
        else:
            chunk_tokens = append(chunk_tokens, left)
            budget -= left
            index = frontier + 1
            while budget > 0 and index < count:
                slot = prefilling[index]
                slot_left = slot.prefill_left
                tokens = slot_left if slot_left < budget else budget
                slots.append(slot)
                chunk_tokens = append(chunk_tokens, tokens)
                budget -= tokens
                index += 1
            while budget > 0:
                if queued == len(waiting):
                    return _run(slots, chunk_tokens, plan_ends, admitted, admitted_ends, times, end)
                head = waiting[queued]
                if running >= max_num_seqs:
                    break
                reserved = kv.admission_plan(head, plan_number)
                if reserved < 0:  # its prompt differs from its group's: admit refuses
                    return _run(slots, chunk_tokens, plan_ends, admitted, admitted_ends, times, end)
                if used + size + reserved > capacity:
                    break  # the head does not fit: it blocks the queue (first come, first served)
                if not plans_admissions or isinstance(head, MultiTurnRollout):  # an admission the run does not plan
                    return _run(slots, chunk_tokens, plan_ends, admitted, admitted_ends, times, end)
                # The slot's prefill, which `KVLedger.admit_planned` books at the boundary; until then the plan's.
                head_context = head.context_tokens
                cached = planned_cached_tokens(head_context, reserved)
                slot = Slot(head, order)
                slot.computed = cached
                slot_left = slot.prefill_left = head_context - cached
                order += 1
                queued += 1
                running += 1
                used += reserved
                kv.plan_holds(head, plan_number)
                if queued == 1:
                    prefilling = list(prefilling)  # the plan's own from its first admission, the engine's as it is
                admitted.append(slot)
                prefilling.append(slot)
                count += 1
                tokens = slot_left if slot_left < budget else budget
                slots.append(slot)
                chunk_tokens = append(chunk_tokens, tokens)
                budget -= tokens
            if len(slots) - begin == 1:
                seconds = costs.chunk_iteration_seconds(size, float(context), left, computed, True)
            else:
                # The frontier's last chunk, after the tokens the run prefilled; the other slots are as the engine
                # has them, or as their planned admission set them. Priced by the chunks' counts (`prefill_counts`).
                new_tokens, cached_tokens, logit_chunks = left, computed, 1
                pairs = chunk_pairs(left, computed)
                for index in range(begin + 1, len(slots)):
                    slot = slots[index]
                    tokens = chunk_tokens[index]
                    slot_computed = slot.computed
                    new_tokens += tokens
                    cached_tokens += slot_computed
                    pairs += chunk_pairs(tokens, slot_computed)
                    if tokens == slot.prefill_left:
                        logit_chunks += 1
                seconds = costs.counted_iteration_seconds(size, float(context), new_tokens, cached_tokens, pairs,
                                                          logit_chunks, len(slots) - begin)
        times = append(times, end)
        plan_ends = append(plan_ends, len(slots))
        admitted_ends = append(admitted_ends, len(admitted))
        end = end + seconds


def plan_chunks(plan: Plan, first: int = 0) -> list[ChunkFields]:
    """The prefill chunks of the plan's slots from `first` on, as their slots stand before the iteration (plain
    tuples of a `PrefillChunk`'s fields: the pricing reads them by position)."""
    return [(tokens, slot.computed, tokens == slot.prefill_left) for slot, tokens in plan[first:]]


def _run(slots: list[Slot], tokens: vec[i64], plan_ends: vec[i64], admitted: list[Slot], admitted_ends: vec[i64],
         times: vec[float], end: float) -> PrefillRun | None:
    """The run whose last iteration ends at `end`, or None when it has no boundary to book; the chunks and
    admissions of an iteration the run stopped planning part-way are dropped."""
    if not times:
        return None
    chunks = plan_ends[len(plan_ends) - 1]
    del slots[chunks:]
    del admitted[admitted_ends[len(admitted_ends) - 1]:]
    return PrefillRun(slots, tokens[:chunks], plan_ends, admitted, admitted_ends, times, end)
