"""Rollout engines: one SimPy process per engine (a TP/EP group of GPUs), batching sequences as vLLM V1 does.

An iteration runs every running sequence one step: each decoding sequence produces one token, and sequences being
prefilled get a chunk of their context out of a token budget (`max_num_batched_tokens`) shared with the decodes
(chunked prefill; the last chunk samples the sequence's first token). Between two iterations, at a *boundary*, the
engine

1. honours a pause: drain (stop admitting, let the running sequences finish), interrupt (send every running
   sequence back to the front of the queue with the tokens it generated, its KV cache dropped and recomputed when it
   is readmitted: AReaL's interruptible generation) or hold (stop with the running sequences and their KV cache kept,
   to continue under the new weights: NeMo-RL's and PipelineRL's in-flight weight updates);
2. makes room in the KV cache for the tokens the next iteration writes, by preempting the most recently admitted
   sequence until they fit (vLLM's recompute preemption: the sequence returns to the front of the queue and
   re-prefills its prompt and generated tokens when readmitted);
3. admits waiting sequences first come, first served (or in the order of a length-predicted priority,
   `rlsim.sim.engine.queue_order`) while a sequence slot (`max_num_seqs`), the token budget and the KV cache allow;
   none in a boundary that had to preempt (vLLM does the same).

The engine is a process over named parts (`rlsim.sim.engine`): the scheduler (the queue, the running sequences,
admission and preemption), the KV ledger (what the cache holds, prefix sharing within a GRPO group, released
trajectories' contexts), the decode batch (the fast advance), a sequence's lifecycle (joining the queue, the first
token of a turn, the end of a turn: finished, or tool calls whose return wakes the engine like a submit), the tool
waits of multi-turn trajectories (`MultiTurnRollout`), its telemetry and its state (busy, decoding a stretch, idle or
paused, and the pause asked of it).

Fast advance. Between batch-changing events (an admission or prefill chunk, a finish, a preemption, a wake-up by a
submit or a pause) the engine only decodes a fixed batch, so it computes in closed form how many iterations run until
the first of its sequences finishes or the KV cache fills, and sleeps once for all of them. A wake-up lets the
iteration in flight complete and books the progress. Every sequence's progress is derived from the engine's
iteration counter, so booking is O(1) and a finish O(log batch): events scale with sequences, never with tokens.
When the KV cache fills before any turn ends, the preemptions that follow until the next turn end are determined,
so the stretch covers the whole chain (`rlsim.sim.engine.preemption_chain`): its boundaries are planned in closed
form, slept through in one event, and booked once simulated time has passed them — when the chain ends, when a
wake-up cuts it short, or when anything reads or changes the engine first (`settle`). Long prefills' chunks over
a batch that only grows (a completed prefill joins it, the queue's heads are admitted into the budget left) are
planned and booked the same way (`rlsim.sim.engine.prefill_run`). `mode="exact"` steps one
iteration per event instead, the reference the fast mode must agree with.

Samples (`rlsim.sim.engine.telemetry`) are recorded at every boundary where the batch changed — admission, prefill
iteration, finish, tool call or return, preemption, interruption, pause, resume — and whenever the queue changes
(submit, steal, a tool return that queues). Each engine's samples are in time order; a chain's are appended when it
is booked, so across engines they may not be.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import ClassVar, Literal

import simpy
from mypy_extensions import i64

from rlsim.costs.rollout import IterationCosts
from rlsim.sim.clock import sim_now
from rlsim.sim.engine.controls import EngineControls
from rlsim.sim.engine.decode_batch import DecodeBatch, Stretch
from rlsim.sim.engine.kv_fetch import KVFetch, PrefillRouter
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.lifecycle import SequenceLifecycle
from rlsim.sim.engine.preemption_chain import PreemptionChain, book_boundaries, plan_chain
from rlsim.sim.engine.prefill_run import PrefillRun, plan_chunks, plan_prefill_run
from rlsim.sim.engine.scheduler import Scheduler
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.state import BUSY, DECODING, PREFILLING, EngineState, PauseMode
from rlsim.sim.engine.telemetry import EngineTelemetry, Probe
from rlsim.sim.engine.tool_waits import TOOL_WAIT_POLICIES, ToolWait, ToolWaits
from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import Rollout


class RolloutEngine(EngineControls):
    """A generation engine over GPUs [first_gpu, first_gpu + gpu_count): a SimPy process batching the rollouts
    submitted to it, with a KV cache of `kv_capacity_tokens` tokens.

    `on_finish(rollout)` is called when a rollout reaches its target. `on_queue_empty(engine)`, when set (work
    stealing), is called when the engine could take queued work from elsewhere: its queue is empty after a finish or
    while nothing runs. Load figures count the iterations completed so far, in either mode; a running rollout's
    `generated` is brought up to date when it finishes or is preempted.
    """

    __slots__ = ("max_num_batched_tokens", "kv", "batch", "telemetry", "tools", "scheduler", "state", "lifecycle",
                 "kv_fetch", "_chain")
    # A prefill completed here joins this engine's decode batch (a prefill engine hands it off instead).
    decodes_its_prefills: ClassVar[bool] = True

    def __init__(self, env: simpy.Environment, index: int, costs: IterationCosts, kv_capacity_tokens: int,
                 max_num_seqs: int, max_num_batched_tokens: int, first_gpu: int, gpu_count: int, recorder: Recorder,
                 on_finish: Callable[[Rollout], None], mode: Literal["fast", "exact"] = "fast",
                 prefix_sharing: bool = True, probe: Probe | None = None, tool_wait: str = "hold",
                 busy_labels: tuple[str, str, str] = ("prefill", "decode", "gen"), unit: str | None = None,
                 admission: str = "current_kv", order: str = "fcfs"):
        if kv_capacity_tokens < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(
                f"engine {index}: kv_capacity_tokens, max_num_seqs and max_num_batched_tokens must be >= 1, got "
                f"{kv_capacity_tokens}, {max_num_seqs}, {max_num_batched_tokens}"
            )
        # The queue and running sequences are the scheduler's, read here for the load figures.
        self._set_common(env, index, costs, max_num_seqs, first_gpu, gpu_count, mode, on_finish)
        self.max_num_batched_tokens = max_num_batched_tokens
        # The preemption chain or prefill run the process sleeps through, its boundaries booked as time passes them.
        self._chain: PreemptionChain | PrefillRun | None = None
        self.kv_fetch: KVFetch | None = None  # set when its prompts are prefilled elsewhere (`take_prefills_from`)

        self.lifecycle = SequenceLifecycle(self)
        self.kv = KVLedger(kv_capacity_tokens, prefix_sharing)
        self.batch = DecodeBatch(costs, self.lifecycle.turn_end)
        self.telemetry = EngineTelemetry(env, recorder, first_gpu, gpu_count,
                                         unit if unit is not None else f"engine{index}", busy_labels, probe, self.kv,
                                         self.batch, self._running, self._waiting)
        self.tools = ToolWaits(self, TOOL_WAIT_POLICIES[tool_wait])
        self.scheduler = Scheduler(env, max_num_seqs, max_num_batched_tokens, self.kv, self.batch, self.tools,
                                   self.telemetry, self._waiting, self._running, admission, order)
        self.state = EngineState(env, self._run())

    def take_prefills_from(self, router: PrefillRouter) -> None:
        """Prefill/decode disaggregation: this engine decodes what `router`'s prefill engines prefilled, fetching each
        rollout's KV cache once it has room (`rlsim.sim.engine.kv_fetch`)."""
        self.kv_fetch = self.scheduler.fetch = KVFetch(self, router)

    # ---- what the controller and balancers use ----------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Rollouts submitted and not finished: waiting, running, or at a prefill engine or its link."""
        here = len(self._waiting) + len(self._running)
        return here if self.kv_fetch is None else here + self.kv_fetch.elsewhere

    @property
    def queued(self) -> int:
        """Rollouts waiting for admission."""
        self.settle()
        return len(self._waiting)

    @property
    def running(self) -> int:
        self.settle()
        return len(self._running)

    @property
    def queued_tokens(self) -> int:
        """Context tokens of the waiting rollouts (what admitting them would cache)."""
        self.settle()
        queued = self.scheduler.queued_tokens
        return queued if self.kv_fetch is None else queued + self.kv_fetch.pending_tokens

    @property
    def kv_used_tokens(self) -> int:
        """KV-cache tokens in use after the iterations completed so far."""
        self.settle()
        batch = self.batch
        return self.kv.used + batch.size * batch.unbooked(sim_now(self.env))

    @property
    def predicted_work(self) -> float:
        """Predicted tokens still to generate: predicted lengths of the outstanding rollouts less what they generated
        (an underestimate once sequences outrun their predictions)."""
        self.settle()
        scheduler, batch = self.scheduler, self.batch
        return (scheduler.predicted_total - scheduler.generated_total
                - float(batch.size * batch.unbooked(sim_now(self.env))))

    @property
    def preemptions(self) -> int:
        """Sequences preempted because the KV cache was full."""
        self.settle()
        return self.scheduler.preemptions

    @property
    def interruptions(self) -> int:
        """Sequences sent back to the queue by pause("interrupt")."""
        return self.scheduler.interruptions

    @property
    def cached_prefill_tokens(self) -> int:
        """Context tokens admissions found in the KV cache instead of prefilling."""
        return self.kv.cached_prefill_tokens

    @property
    def tool_calls(self) -> int:
        """Turns that ended in tool calls."""
        return self.tools.calls

    @property
    def tool_wait(self) -> ToolWait:
        return self.tools.policy

    @tool_wait.setter
    def tool_wait(self, policy: ToolWait) -> None:
        self.tools.policy = policy

    def submit(self, rollout: Rollout, predicted_tokens: float | None = None) -> None:
        """Queue `rollout` (first come, first served, or at its rank's place); `predicted_tokens`: its predicted
        length for length-aware balancing, admission and queue order (None: its true target)."""
        if rollout.done:
            raise ValueError(f"rollout {rollout.seq_id} already has its {rollout.target_tokens} tokens")
        self.settle()  # its engine samples the queue it joins: the boundaries before now come first
        if rollout.peak_context_tokens > self.kv.capacity:
            raise ValueError(
                f"rollout {rollout.seq_id} needs {rollout.peak_context_tokens} KV tokens, more than "
                f"engine {self.index}'s whole cache of {self.kv.capacity}"
            )
        rollout.engine = self.index
        predicted = rollout.target_tokens if predicted_tokens is None else predicted_tokens
        if self.kv_fetch is not None:
            self.scheduler.submit(rollout, predicted, queue=False)
            self.kv_fetch.send(rollout)
            return
        self.scheduler.submit(rollout, predicted)
        self.lifecycle.queued(rollout)

    def steal(self, n: int) -> list[tuple[Rollout, float]]:
        """Take up to n rollouts that have not started from the back of the queue (work stealing), in queue order,
        each with its predicted length."""
        self.settle()
        taken = self.scheduler.steal(n)
        if taken:
            self._queue_shortened()
            self.telemetry.sample()
        return taken

    def withdraw(self) -> list[Rollout]:
        """Take back every waiting rollout, started or not (after an interrupting pause, every unfinished one): the
        controller abandons them."""
        self.settle()
        taken = self.scheduler.withdraw()
        if taken:
            self._queue_shortened()
            self.telemetry.sample()
        return taken

    def _queue_shortened(self) -> None:
        """Rollouts left the queue's back: a prefill run that planned to admit one of them, or depends on the head
        after the ones it admits, is cut short after the iteration in flight (the engine decides afresh there)."""
        run = self._chain
        if isinstance(run, PrefillRun) and len(self._waiting) < run.queue_read():
            self.state.wake()

    def pause(self, how: PauseMode) -> simpy.Event:
        """Stop admitting and pause: `drain` once the running sequences finish; `interrupt` at the next iteration
        boundary, sending them back to the front of the queue to be recomputed; `hold` at the next iteration
        boundary, keeping them and their KV cache to continue after resume (in-flight weight updates). The event
        fires once the engine is paused. A pause that stops sooner overrides one under way."""
        taken = self.state.ask_pause(how)
        if how == "drain":
            # A drain stops admissions from the next boundary on: a prefill run that planned some there is cut
            # short after the iteration in flight (the other pauses cut any run).
            self.settle()
            run = self._chain
            if isinstance(run, PrefillRun) and run.queue_read():
                self.state.wake()
        return taken

    def close(self) -> None:
        """The run stops now: record the busy span still open, with the work in flight up to now, and bring the
        running rollouts' `generated` up to date."""
        self.settle()
        held = self.tools.held
        decoding = (slot for slot in self._running.in_admission_order()
                    if not slot.prefill_left and slot.rollout not in held)
        self.batch.catch_up(decoding, sim_now(self.env))
        self.telemetry.close(self.version)
        self.telemetry.sample()

    def settle(self) -> None:
        """Book the boundaries of the preemption chain under way that simulated time has passed, so that whatever
        reads or changes the engine now finds it as the step-by-step path would have left it."""
        chain = self._chain
        if chain is not None:
            first = chain.booked
            stop = chain.due(sim_now(self.env))
            if stop > first:
                # Branched on the type rather than a bound method kept for it: compiled, a direct call.
                if isinstance(chain, PrefillRun):
                    self._prefill_boundaries(chain, first, stop)
                else:
                    self._preemption_boundaries(chain, first, stop)

    # ---- the engine process -----------------------------------------------------------------------------------

    def _run(self) -> Generator[simpy.Event, object, None]:
        telemetry, batch, scheduler, state = self.telemetry, self.batch, self.scheduler, self.state
        while True:
            preempted = scheduler.make_room(interrupt=state.pause is not None and state.pause.mode == "interrupt")
            if state.pause is not None and (not self._running or state.pause.mode == "hold"):
                telemetry.sample()
                telemetry.flush(self.version)
                yield state.take_pause()
                telemetry.changed = True  # resumed
                continue
            if (self.on_queue_empty is not None and not self._waiting and state.pause is None
                    and (scheduler.left or not self._running)):
                self.on_queue_empty(self)
            scheduler.left = False
            plan = scheduler.plan(admit=state.pause is None and (not preempted or not self._running))
            if telemetry.changed:
                telemetry.sample()
            if plan:
                yield from self._prefill_iteration(plan)
            elif batch.size:
                # A boundary that preempted admitted nothing; the next may (a trajectory preempted in its tool call
                # leaves the queue's head free to go), so step one iteration to reach it, as the exact mode does.
                # If the head will not fit then, it will not before the batch changes either: the cache only grows.
                # Past-future admission may let a head that fits wait for the predicted peak to fall, which it does
                # at some iteration of the stretch: step one iteration at a time until it is admitted.
                step_one = self.mode == "exact" or (
                    bool(self._waiting) and (preempted or (scheduler.past_future and state.pause is None))
                    and scheduler.fits_now(self._waiting[0], growth=batch.size))
                yield from self._decode_exact() if step_one else self._decode_fast()
            else:
                # Waiting rollouts may be blocked only by a pause, or by slots and KV held through tool calls or
                # by KV caches on their way in or out.
                assert not self._waiting or state.pause is not None or self._holds_kv_in_transit(), (
                    f"engine {self.index} idles with {len(self._waiting)} rollouts waiting")
                telemetry.flush(self.version)
                yield state.idle()
                state.activity = BUSY

    def _holds_kv_in_transit(self) -> bool:
        """Whether slots or KV cache the queue may wait for are held by sequences in tool calls or in transfer."""
        return bool(self.tools.held) or (self.kv_fetch is not None and self.kv_fetch.fetching > 0)

    def _prefill_iteration(self, plan: list[tuple[Slot, int]]) -> Generator[simpy.Event, object, None]:
        """One iteration mixing the decode batch with prefill chunks."""
        telemetry, batch = self.telemetry, self.batch
        telemetry.begin(telemetry.prefill_label)
        if len(plan) == 1:
            slot, tokens = plan[0]
            seconds = self.costs.chunk_iteration_seconds(batch.size, float(batch.context), tokens, slot.computed,
                                                         tokens == slot.prefill_left)
        else:
            seconds = self.costs.iteration_seconds(batch.size, float(batch.context), plan_chunks(plan))
        run = self._plan_prefill_run(plan, seconds)
        if run is None:
            yield self.env.timeout(seconds)
        else:
            yield from self._sleep_through(run)
            plan = run.last_plan()
        telemetry.end(self.version)
        self._advance(1, decode=False)
        telemetry.changed = True
        prefilled = self.scheduler.prefilled(plan)
        batch.finish_due()
        lifecycle = self.lifecycle
        for slot in prefilled:
            lifecycle.first_token(slot)

    def _decode_exact(self) -> Generator[simpy.Event, object, None]:
        telemetry, batch = self.telemetry, self.batch
        telemetry.begin(telemetry.decode_label)
        # One iteration of the closed form (the iteration time to rounding, from the batch's cached profile) rather
        # than re-pricing its kernels: after a preemption the fast mode steps here once per iteration, tens of
        # thousands of times in a long-tail step.
        yield self.env.timeout(self.costs.decode_k_iterations_seconds(batch.size, float(batch.context), 1))
        telemetry.end(self.version)
        self._advance(1, decode=True)
        batch.finish_due()

    def _decode_fast(self) -> Generator[simpy.Event, object, None]:
        """Decode the fixed batch until its first finish or a full KV cache, in one event unless woken earlier; when
        the cache fills before any turn ends, through the whole preemption chain up to the next turn end."""
        batch, state, env = self.batch, self.state, self.env
        now = sim_now(env)
        stretch = self._begin_stretch(now)
        chain = self._chain = self._plan_chain(now)
        state.activity = DECODING
        try:
            yield env.timeout(stretch.seconds if chain is None else _delay_until(now, chain.end))
            state.activity = BUSY
            self.settle()
            self._chain = None
        except simpy.Interrupt:
            self.settle()
            self._chain = None
            wait = batch.cut_short(sim_now(env))  # the iteration in flight completes before anything changes
            if wait is not None:
                yield env.timeout(wait)
        self._end_stretch()

    def _begin_stretch(self, at: float) -> Stretch:
        """A fast decode stretch of the batch starts at `at`, until its first finish or a full KV cache."""
        kv, telemetry = self.kv, self.telemetry
        stretch = self.batch.begin_stretch(at, kv.capacity - kv.used)
        telemetry.begin(telemetry.decode_label, at)
        return stretch

    def _end_stretch(self, at: float | None = None) -> None:
        """The stretch under way ended now (or at `at`): book its iterations and the turns they ended."""
        self.telemetry.end(self.version, at)
        self._advance(self.batch.end_stretch(), decode=True)
        self.batch.finish_due()

    def _plan_chain(self, now: float) -> PreemptionChain | None:
        """The preemption chain the stretch just begun (at `now`) opens, where one can be booked after the fact:
        nothing may observe the boundaries as they pass (a probe), nor change the batch in between (prefills, held tool
        calls, a pause). A chain takes the queue's head to be its last victim, as first come, first served puts it: a
        ranked queue (length-predicted priority) books each boundary as it comes instead."""
        scheduler = self.scheduler
        if (self.telemetry.probe is not None or scheduler.prefilling or self._holds_kv_in_transit()
                or self.state.pause is not None or scheduler.rank is not None):
            return None
        chain = plan_chain(now, self.batch, self.kv, self._running, self.max_num_seqs, self.max_num_batched_tokens,
                           self.costs)
        if chain is None or now + _delay_until(now, chain.end) != chain.end:
            return None
        return chain

    def _plan_prefill_run(self, plan: list[tuple[Slot, int]], seconds: float) -> PrefillRun | None:
        """The prefill run the iteration just begun opens, where one can be booked after the fact: nothing may
        observe its boundaries as they pass (a probe), nor change the batch or the cache in between (held tool calls,
        KV caches in transfer, a pause), and a prefill completed in it joins this engine's decode batch. It admits
        the queue's heads where the scheduler can replay admissions exactly (`Scheduler.plannable_admission`)."""
        prefilling = self.scheduler.prefilling
        last, last_tokens = plan[-1]
        if len(plan) == len(prefilling) and last_tokens == last.prefill_left:
            # The commonest refusal, tested first: every prefill completes, so the boundary after the iteration
            # admits, or the batch decodes alone.
            return None
        if (self.mode == "exact" or self.telemetry.probe is not None or self.state.pause is not None
                or not self.decodes_its_prefills):
            return None
        now, scheduler = sim_now(self.env), self.scheduler
        run = plan_prefill_run(now, seconds, plan, prefilling, self.batch, self.kv, self.max_num_batched_tokens,
                               self._waiting, len(self._running), self.max_num_seqs, scheduler.plannable_admission(),
                               self.costs)
        # Most plans open no run: the test of what is in transit waits for one that does (planning changes nothing).
        if run is None or self._holds_kv_in_transit() or now + _delay_until(now, run.end) != run.end:
            return None
        return run

    def _sleep_through(self, run: PrefillRun) -> Generator[simpy.Event, object, None]:
        """Sleep until the run's last iteration ends, or, woken earlier, until the iteration then in flight ends; the
        boundaries passed are booked."""
        state, env = self.state, self.env
        self._chain = run
        state.activity = PREFILLING
        try:
            yield env.timeout(_delay_until(sim_now(env), run.end))
            state.activity = BUSY
        except simpy.Interrupt:
            self.settle()
            yield env.timeout(_delay_until(sim_now(env), run.cut()))
        self.settle()
        self._chain = None

    def _prefill_boundaries(self, run: PrefillRun, first: int, stop: int) -> None:
        """The prefill run's boundaries from `first` to `stop` (excluded), booked in one pass as the step-by-step
        path books each at its time, at the end of the iteration that prefilled the chunks planned for it: the
        iteration ends, the prefills it completed sample their token and join the decode batch, the queue's heads
        planned there are admitted, nothing else changes but the counters, the engine is sampled, and the next chunks
        start (back to back: one busy span)."""
        # Methods called as attributes, not bound to locals first: compiled, a call through an attribute of a
        # compiled class is a direct C call, one through a local holding the bound method a Python call.
        batch, kv, scheduler, lifecycle = self.batch, self.kv, self.scheduler, self.lifecycle
        running, waiting = self._running, self._waiting
        times, slots, tokens, plan_ends = run.times, run.slots, run.tokens, run.plan_ends
        admitted, admitted_ends = run.admitted, run.admitted_ends
        telemetry = self.telemetry
        samples, code = telemetry.samples, telemetry.code
        begin: i64 = plan_ends[first - 1] if first else 0
        taken: i64 = admitted_ends[first - 1] if first else 0
        for index in range(first, stop):
            at = times[index]
            # `_advance(1, decode=False)`, but for its trim(0): the boundary's trim(size) below evicts what that would
            # and more, and nothing between them reads the cache.
            grown = batch.advance(1, False)
            kv.used += grown
            scheduler.generated_total += grown
            end = plan_ends[index]
            # The prefills completed in this iteration are its first chunks' (only its last chunk can stop short).
            completed = scheduler.prefilled_chunks(slots, tokens, begin, end)
            for chunk in range(begin, begin + completed):
                lifecycle.first_token(slots[chunk])
            begin = end
            kv.trim(batch.size)  # the boundary's make_room, which has nothing to preempt
            until = admitted_ends[index]
            while taken < until:
                scheduler.book_admission(admitted[taken], at)
                taken += 1
            samples.add(code, at, len(running), len(waiting), kv.used, batch.size, batch.iteration,
                        batch.decode_iterations, batch.decode_read)
        telemetry.restarted(times, first, stop, self.version)

    def _preemption_boundaries(self, chain: PreemptionChain, first: int, stop: int) -> None:
        """The chain's boundaries from `first` to `stop` (excluded), booked in one pass as the step-by-step path
        books each at its time: the stretch ends, the cache is full, the latest admitted sequences are preempted,
        nothing is admitted, a sample is recorded, and the smaller batch decodes on for as long as the plan priced.
        No turn ends at a chain's boundary, so the finish heap is left as it is (its stale entries are dropped when
        they reach its head)."""
        batch, telemetry = self.batch, self.telemetry
        book_boundaries(chain, first, stop, batch.end_stretch(), batch, self.kv, self.scheduler, telemetry.samples,
                        telemetry.code)
        times = chain.times
        telemetry.restarted(times, first, stop, self.version)
        last = stop - 1
        batch.planned_stretch(times[last], chain.iterations[last], chain.seconds[last])

    # ---- book-keeping, O(1) or O(log batch) per event --------------------------------------------------------

    def _advance(self, iterations: i64, decode: bool) -> None:
        """Book `iterations` iterations: every decoding sequence gained as many tokens. Released contexts that the
        growth needed room from are evicted now, as the boundaries inside a fast stretch would have done."""
        grown = self.batch.advance(iterations, decode)
        kv = self.kv
        kv.used += grown
        self.scheduler.generated_total += grown
        kv.trim(0)


def _delay_until(now: float, at: float) -> float:
    """The delay that SimPy, adding it to `now`, schedules at `at` to the bit (at - now may round away from it)."""
    delay = at - now
    for _ in range(4):
        reached = now + delay
        if reached == at:
            break
        delay = math.nextafter(delay, math.inf if reached < at else -math.inf)
    return delay
