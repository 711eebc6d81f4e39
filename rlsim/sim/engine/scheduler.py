"""Which sequences an engine runs: vLLM V1's scheduler, at the boundary between two iterations."""
from __future__ import annotations

from math import ceil
from typing import TYPE_CHECKING

import simpy
from librt.vecs import vec
from mypy_extensions import i64

from rlsim.sim.clock import sim_now
from rlsim.sim.engine.admission import predicted_peak_tokens
from rlsim.sim.engine.decode_batch import DecodeBatch
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.queue_order import QUEUE_ORDERS, repredicted_remaining
from rlsim.sim.engine.running import RunningSlots
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.telemetry import EngineTelemetry
from rlsim.sim.engine.tool_waits import ToolWaits
from rlsim.sim.engine.waiting import WaitingQueue
from rlsim.sim.sequence import MultiTurnRollout, Rollout

if TYPE_CHECKING:
    from rlsim.sim.engine.kv_fetch import KVFetch


class Scheduler:
    """The engine's outstanding rollouts: its queue (`waiting`, first come, first served unless a length-predicted
    `order` ranks it: `rlsim.sim.engine.queue_order`) and its `running` sequences
    in admission order, of which those still `prefilling`. At a boundary it makes room in the KV cache for the tokens
    the next iteration writes, preempting the most recently admitted sequence until they fit (vLLM's recompute
    preemption: the sequence returns to the front of the queue and re-prefills its prompt and generated tokens when
    readmitted), then plans the iteration's prefill chunks out of the token budget left by the decodes: the running
    prefills first, then admissions while a sequence slot (`max_num_seqs`), the budget and the KV cache allow.

    With `past_future` admission, a head that fits the cache now is admitted only if the running sequences' predicted
    peak occupancy with it fits too (`rlsim.sim.engine.admission`).

    It also keeps the load figures of the outstanding rollouts: their predicted lengths and the tokens they generated
    (booked), for length-aware balancing."""

    __slots__ = ("env", "max_num_seqs", "max_num_batched_tokens", "kv", "batch", "tools", "telemetry", "waiting",
                 "running", "prefilling", "queued_tokens", "preemptions", "interruptions", "left", "predicted_total",
                 "generated_total", "fetch", "past_future", "rank", "_predicted", "_admissions")

    def __init__(self, env: simpy.Environment, max_num_seqs: int, max_num_batched_tokens: int, kv: KVLedger,
                 batch: DecodeBatch, tools: ToolWaits, telemetry: EngineTelemetry, waiting: WaitingQueue,
                 running: RunningSlots, admission: str = "current_kv", order: str = "fcfs"):
        self.env = env
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.kv = kv
        self.batch = batch
        self.tools = tools
        self.telemetry = telemetry
        self.waiting = waiting
        self.running = running
        self.prefilling: list[Slot] = []
        self.queued_tokens = 0  # context tokens of the waiting sequences (what admitting them would cache)
        self.preemptions = 0  # sequences preempted because the KV cache was full
        self.interruptions = 0  # sequences sent back to the queue by an interrupting pause
        self.left = False  # a sequence left the engine since the last boundary: work stealing may refill it
        self._predicted: dict[Rollout, float] = {}
        self.predicted_total = 0.0  # predicted lengths of the outstanding rollouts
        self.generated_total = 0  # tokens they generated (booked)
        self.fetch: KVFetch | None = None  # a decode engine's rollouts prefilled elsewhere (prefill/decode disaggregation)
        self.past_future = admission == "past_future"
        self.rank = QUEUE_ORDERS[order].rank  # None: first come, first served
        self._admissions = 0

    def submit(self, rollout: Rollout, predicted: float, queue: bool = True) -> None:
        """A new outstanding rollout, predicted to generate `predicted` tokens in all, queued at the back (or, with
        `queue` false, once a prefill engine has prefilled it)."""
        self._predicted[rollout] = predicted
        self.predicted_total += predicted
        self.generated_total += rollout.generated
        if queue:
            self.queue(rollout)

    def queue(self, rollout: Rollout) -> None:
        """Queue at the back (at its rank's place in a ranked queue): submitted, or back from tool calls that
        released its slot."""
        if self.rank is None:
            self.waiting.append(rollout)
        else:
            self._insert_by_rank(rollout)
        self.queued_tokens += rollout.context_tokens

    def _insert_by_rank(self, rollout: Rollout) -> None:
        """Queue the rollout after every waiting one of a lower or equal rank, re-predicted from its progress; its
        rank holds while it waits, as it generates nothing."""
        rank, predicted = self.rank, self._predicted
        assert rank is not None
        self.waiting.insert_ranked(rollout, lambda waiting: rank(repredicted_remaining(waiting, predicted[waiting])))

    def finish(self, slot: Slot) -> None:
        """The slot's rollout reached its target: it leaves, its KV freed."""
        rollout = slot.rollout
        target = rollout.target_tokens
        self.running.remove(slot)
        slot.live = False
        rollout.generated = target
        self.kv.drop(slot, rollout.context_tokens)
        self.telemetry.changed = True
        self.generated_total -= target
        self.predicted_total -= self._predicted.pop(rollout)
        self.left = True

    def hand_off(self, slot: Slot) -> None:
        """A prefill engine's slot sampled its first token and leaves for a decode engine; its KV stays cached here
        until the decode engine has fetched it."""
        rollout = slot.rollout
        self.running.remove(slot)
        slot.live = False
        self.telemetry.changed = True
        self.generated_total -= rollout.generated
        self.predicted_total -= self._predicted.pop(rollout)
        self.left = True

    def release(self, slot: Slot) -> None:
        """The slot's trajectory leaves for its tool calls without holding its slot, its context left cached."""
        self.running.remove(slot)
        slot.live = False
        self.kv.release(slot)
        self.left = True

    def make_room(self, interrupt: bool) -> bool:
        """Boundary work before planning: held trajectories back from their tools resume; an interrupting pause
        empties the engine; otherwise preempt until the next iteration's tokens fit. Whether anything was preempted."""
        if self.tools.returned:
            self.tools.resume_held(self.prefilling)
        if self.fetch is not None and self.fetch.arrived:
            self.fetch.join_arrived()
        running = self.running
        if interrupt and running:
            for slot in reversed(running.in_admission_order()):
                self.evict(slot)
                self.interruptions += 1
                self.telemetry.observe("interrupted", slot.rollout)
            self.batch.emptied()
            return False
        kv, batch = self.kv, self.batch
        kv.trim(batch.size)
        preempted = False
        # A held trajectory back from its tools reserves room for its new tokens unchecked, so even with nothing
        # decoding the cache can be over-full.
        while running and kv.used + batch.size > kv.capacity:
            self.preempt(running.latest())
            preempted = True
        return preempted

    def preempt(self, slot: Slot) -> None:
        """Evict the slot's sequence because the KV cache is full (recompute preemption)."""
        self.evict(slot)
        slot.rollout.preemptions += 1
        self.preemptions += 1
        self.telemetry.observe("preempted", slot.rollout)

    def plan(self, admit: bool) -> list[tuple[Slot, int]]:
        """Prefill chunks of the next iteration: the running prefills first, then admissions while `admit`."""
        budget = self.max_num_batched_tokens - self.batch.size
        plan: list[tuple[Slot, int]] = []
        for slot in self.prefilling:
            if budget <= 0:
                break
            tokens = min(slot.prefill_left, budget)
            plan.append((slot, tokens))
            budget -= tokens
        waiting = self.waiting
        fetch = self.fetch
        while admit and budget > 0 and waiting and self.admissible(waiting[0]):
            slot = self._admit(waiting.popleft())
            if fetch is not None and fetch.takes(slot):
                continue  # its KV cache comes from a prefill engine
            tokens = min(slot.prefill_left, budget)
            plan.append((slot, tokens))
            budget -= tokens
        return plan

    def prefilled(self, plan: list[tuple[Slot, int]]) -> list[Slot]:
        """The planned chunks ran: the slots whose prefill is now complete, which sample their next token."""
        done: list[Slot] = []
        for slot, tokens in plan:
            if _chunk_ran(slot, tokens):
                done.append(slot)
        if done:
            self._prefills_completed(len(done))
        return done

    def prefilled_chunks(self, slots: list[Slot], tokens: vec[i64], begin: i64, end: i64) -> i64:
        """`prefilled` of the chunks `tokens[j]` of `slots[j]` for j in [begin, end) (a prefill run's columns):
        how many of those slots completed their prefill, which are those now with none left."""
        done: i64 = 0
        for index in range(begin, end):
            if _chunk_ran(slots[index], tokens[index]):
                done += 1
        if done:
            self._prefills_completed(done)
        return done

    def _prefills_completed(self, done: i64) -> None:
        """`done` prefills completed: the first ones. An iteration's chunks go to the prefilling slots in order,
        each as much of the budget as it needs, so only the last of them can stop short of its end."""
        del self.prefilling[:done]

    def admissible(self, rollout: Rollout, growth: int = 0) -> bool:
        """Whether `rollout` is admitted: it `fits_now`, and with `past_future` admission and something running, the
        running sequences' predicted peak KV with it fits the cache too."""
        return (self.fits_now(rollout, growth)
                and (not self.past_future or not self.running or self._peak_fits(rollout)))

    def fits_now(self, rollout: Rollout, growth: int = 0) -> bool:
        """A free slot, and room in the KV cache for its context after the decodes of the next iteration; `growth`:
        at the boundary after the cache has grown by that many more tokens. The cache only grows while a batch
        decodes, so a rollout that does not fit now does not before the batch changes (the predicted peak, by
        contrast, falls as running sequences near their predicted ends)."""
        decoding = self.batch.size
        running = len(self.running) if self.fetch is None else len(self.running) + self.fetch.fetching
        return (running < self.max_num_seqs and decoding < self.max_num_batched_tokens
                and self.kv.fits(rollout, growth + decoding))

    def _peak_fits(self, rollout: Rollout) -> bool:
        """Whether the predicted peak KV occupancy of the running sequences and `rollout` fits the cache (the
        Past-Future scheduler's admission); each is predicted to end at its predicted length, or one token on when
        it has outgrown it."""
        iteration, predicted, kv = self.batch.iteration, self._predicted, self.kv
        sequences: list[tuple[int, int]] = []
        for slot in self.running.in_admission_order():
            running = slot.rollout
            # A decoding slot's `generated` is booked lazily; its progress is the iteration counter's.
            generated = (slot.start_generated + iteration - slot.start_iteration if slot.decoding
                         else running.generated)
            own = (slot.own_prompt + running.context_tokens - running.prompt_tokens + generated - running.generated
                   + (1 if slot.prefill_left else 0))  # a prefilling slot's reservation for its first token
            sequences.append((max(ceil(predicted[running]) - generated, 1), own))
        need = kv.admission_tokens(rollout)
        sequences.append((max(ceil(predicted[rollout]) - rollout.generated, 1), need))
        return predicted_peak_tokens(kv.used + need, sequences) <= kv.capacity

    def steal(self, n: int) -> list[tuple[Rollout, float]]:
        """Take up to n rollouts that have not started from the back of the queue, in queue order, each with its
        predicted length (the engine that takes it admits and ranks it by the same prediction)."""
        taken: list[tuple[Rollout, float]] = []
        waiting = self.waiting
        while len(taken) < n and waiting and waiting[-1].generated == 0:
            rollout = waiting.pop()
            self.queued_tokens -= rollout.context_tokens
            predicted = self._predicted.pop(rollout)
            self.predicted_total -= predicted
            taken.append((rollout, predicted))
        taken.reverse()
        return taken

    def withdraw(self) -> list[Rollout]:
        """Take back every waiting rollout, started or not: the controller abandons them (a remedy's abort)."""
        taken = list(self.waiting)
        self.waiting.clear()
        for rollout in taken:
            self.queued_tokens -= rollout.context_tokens
            self.predicted_total -= self._predicted.pop(rollout)
            self.generated_total -= rollout.generated
        return taken

    def evict(self, slot: Slot) -> None:
        """Drop a running sequence's KV cache and put it back at the front of the queue, keeping its tokens."""
        rollout = slot.rollout
        self.running.remove(slot)
        slot.live = False
        self.telemetry.changed = True
        if slot.prefill_left:
            self.prefilling.remove(slot)
            self.kv.drop(slot, rollout.context_tokens + 1)  # its reservation for the first token
        elif isinstance(rollout, MultiTurnRollout) and self.tools.drop(rollout):
            self.kv.drop(slot, rollout.context_tokens)
        else:
            self.batch.leave(slot)
            self.kv.drop(slot, rollout.context_tokens)
        if isinstance(rollout, MultiTurnRollout) and rollout.in_tool:
            return  # it queues again when its tools return
        if self.rank is None:
            self.waiting.appendleft(rollout)
        else:
            self._insert_by_rank(rollout)
        self.queued_tokens += rollout.context_tokens

    def plannable_admission(self) -> int | None:
        """The admission order of the next sequence admitted, when a plan ahead (`rlsim.sim.engine.prefill_run`) can
        replay admissions exactly: first come, first served, by the current KV cache, with no released context that
        an admission could revive or evict and no KV cache fetched from elsewhere; else None."""
        if self.rank is not None or self.past_future or self.fetch is not None or self.kv.holds_released:
            return None
        return self._admissions

    def book_admission(self, slot: Slot, at: float) -> None:
        """A planned admission of the queue's head, in `slot`, booked after the fact at its boundary `at`: the
        engine is left as `plan` would have left it then."""
        rollout = self.waiting.popleft()
        assert rollout is slot.rollout and slot.order == self._admissions, "a planned admission out of order"
        self._admitted(slot, at, True)

    def _admit(self, rollout: Rollout) -> Slot:
        slot = Slot(rollout, self._admissions)
        self._admitted(slot, sim_now(self.env), False)
        return slot

    def _admitted(self, slot: Slot, at: float, planned: bool) -> None:
        """The slot's rollout, just taken off the queue, is admitted at `at`: its KV reserved, it prefills next
        (`planned`: as a plan ahead set the slot to, `KVLedger.admit_planned`)."""
        rollout = slot.rollout
        context = rollout.context_tokens
        self.queued_tokens -= context
        if planned:
            self.kv.admit_planned(slot, context)
        else:
            self.kv.admit(slot, self.batch.size, context)
        self._admissions += 1
        if rollout.admitted < 0:
            rollout.admitted = at
        rollout.admissions += 1
        telemetry = self.telemetry
        telemetry.changed = True
        self.running.add(slot)
        self.prefilling.append(slot)
        telemetry.observe("admitted", rollout)


def _chunk_ran(slot: Slot, tokens: int) -> bool:
    """A chunk of `tokens` of the slot's prefill ran; whether that completed its prefill."""
    slot.computed += tokens
    left = slot.prefill_left = slot.prefill_left - tokens
    return not left
