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
3. admits waiting sequences first come, first served while a sequence slot (`max_num_seqs`), the token budget and
   the KV cache allow; none in a boundary that had to preempt (vLLM does the same).

The engine is a process over named parts (`rlsim.sim.engine`): the KV ledger (what the cache holds, prefix sharing
within a GRPO group, released trajectories' contexts), the decode batch (the fast advance), the tool waits of
multi-turn trajectories (`MultiTurnRollout`: a tool return wakes the engine like a submit), its telemetry and its
state (busy, decoding a stretch, idle or paused).

Fast advance. Between batch-changing events (an admission or prefill chunk, a finish, a preemption, a wake-up by a
submit or a pause) the engine only decodes a fixed batch, so it computes in closed form how many iterations run until
the first of its sequences finishes or the KV cache fills, and sleeps once for all of them. A wake-up lets the
iteration in flight complete and books the progress. Every sequence's progress is derived from the engine's
iteration counter, so booking is O(1) and a finish O(log batch): events scale with sequences, never with tokens.
`mode="exact"` steps one iteration per event instead, the reference the fast mode must agree with.

Samples (`rlsim.sim.engine.telemetry`) are recorded at every boundary where the batch changed — admission, prefill
iteration, finish, tool call or return, preemption, interruption, pause, resume — and whenever the queue changes
(submit, steal, a tool return that queues).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Literal

import simpy

from rlsim.costs.rollout import PrefillChunk
from rlsim.sim.engine.decode_batch import DecodeBatch, IterationCosts
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.state import EngineState, PauseMode, PauseRequest
from rlsim.sim.engine.telemetry import EngineTelemetry, Probe
from rlsim.sim.engine.tool_waits import TOOL_WAIT_POLICIES, ToolWait, ToolWaits
from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import MultiTurnRollout, Rollout

# An enum member looked up on its class costs several times a global: the process checks its state on every event.
BUSY, DECODING, IDLE, PAUSED = EngineState.BUSY, EngineState.DECODING, EngineState.IDLE, EngineState.PAUSED


class RolloutEngine:
    """A generation engine over GPUs [first_gpu, first_gpu + gpu_count): a SimPy process batching the rollouts
    submitted to it, with a KV cache of `kv_capacity_tokens` tokens.

    `on_finish(rollout)` is called when a rollout reaches its target. `on_queue_empty(engine)`, when set (work
    stealing), is called when the engine could take queued work from elsewhere: its queue is empty after a finish or
    while nothing runs. Load figures count the iterations completed so far, in either mode; a running rollout's
    `generated` is brought up to date when it finishes or is preempted.
    """

    __slots__ = ("env", "index", "costs", "max_num_seqs", "max_num_batched_tokens", "first_gpu", "gpu_count", "mode",
                 "on_finish", "on_queue_empty", "version", "preemptions", "interruptions", "queued_tokens", "kv",
                 "batch", "telemetry", "tools", "state", "process", "_pause", "_wakeup", "_waiting", "_running",
                 "_prefilling", "_admissions", "_finished_since_boundary", "_predicted", "_predicted_total",
                 "_generated_total")

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        costs: IterationCosts,
        kv_capacity_tokens: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        first_gpu: int,
        gpu_count: int,
        recorder: Recorder,
        on_finish: Callable[[Rollout], None],
        mode: Literal["fast", "exact"] = "fast",
        prefix_sharing: bool = True,
        probe: Probe | None = None,
        tool_wait: str = "hold",
        busy_labels: tuple[str, str, str] = ("prefill", "decode", "gen"),
        unit: str | None = None,
    ):
        if mode not in ("fast", "exact"):
            raise ValueError(f"mode must be 'fast' or 'exact', got {mode!r}")
        if kv_capacity_tokens < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(
                f"engine {index}: kv_capacity_tokens, max_num_seqs and max_num_batched_tokens must be >= 1, got "
                f"{kv_capacity_tokens}, {max_num_seqs}, {max_num_batched_tokens}"
            )
        self.env = env
        self.index = index
        self.costs = costs
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.first_gpu = first_gpu
        self.gpu_count = gpu_count
        self.mode = mode
        self.on_finish = on_finish
        self.on_queue_empty: Callable[[RolloutEngine], None] | None = None

        self.version = 0  # policy version of the weights it holds
        self.preemptions = 0  # sequences preempted because the KV cache was full
        self.interruptions = 0  # sequences sent back to the queue by pause("interrupt")
        self.queued_tokens = 0  # context tokens of the waiting sequences (what admitting them would cache)
        self._waiting: deque[Rollout] = deque()
        self._running: dict[Rollout, Slot] = {}  # in admission order
        self._prefilling: list[Slot] = []  # running sequences not yet prefilled, in admission order
        self._admissions = 0
        self._finished_since_boundary = False  # a sequence left: work stealing may refill the engine
        self._predicted: dict[Rollout, float] = {}
        self._predicted_total = 0.0  # predicted lengths of the outstanding rollouts
        self._generated_total = 0  # tokens they generated (booked)

        self.kv = KVLedger(kv_capacity_tokens, prefix_sharing)
        self.batch = DecodeBatch(costs, self._turn_end)
        self.telemetry = EngineTelemetry(env, recorder, first_gpu, gpu_count,
                                         unit if unit is not None else f"engine{index}", busy_labels, probe, self.kv,
                                         self.batch, self._running, self._waiting)
        self.tools = ToolWaits(self, TOOL_WAIT_POLICIES[tool_wait])
        self.state = BUSY
        self._pause: PauseRequest | None = None  # asked for and not yet taken
        self._wakeup: simpy.Event | None = None  # what the process waits on while idle or paused
        self.process = env.process(self._run())

    # ---- what the controller and balancers use ----------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Rollouts submitted and not finished: waiting plus running."""
        return len(self._waiting) + len(self._running)

    @property
    def queued(self) -> int:
        """Rollouts waiting for admission."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def kv_used_tokens(self) -> int:
        """KV-cache tokens in use after the iterations completed so far."""
        batch = self.batch
        return self.kv.used + batch.size * batch.unbooked(self.env.now)

    @property
    def predicted_work(self) -> float:
        """Predicted tokens still to generate: predicted lengths of the outstanding rollouts less what they generated
        (an underestimate once sequences outrun their predictions)."""
        batch = self.batch
        return self._predicted_total - self._generated_total - batch.size * batch.unbooked(self.env.now)

    @property
    def paused(self) -> bool:
        return self.state is PAUSED

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv.capacity

    @property
    def prefix_sharing(self) -> bool:
        return self.kv.sharing

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

    @property
    def probe(self) -> Probe | None:
        return self.telemetry.probe

    @probe.setter
    def probe(self, probe: Probe | None) -> None:
        self.telemetry.probe = probe

    def submit(self, rollout: Rollout, predicted_tokens: float | None = None) -> None:
        """Queue `rollout` (first come, first served); `predicted_tokens`: its predicted length for length-aware
        balancing (None: its true target)."""
        if rollout.done:
            raise ValueError(f"rollout {rollout.seq_id} already has its {rollout.target_tokens} tokens")
        if rollout.peak_context_tokens > self.kv.capacity:
            raise ValueError(
                f"rollout {rollout.seq_id} needs {rollout.peak_context_tokens} KV tokens, more than "
                f"engine {self.index}'s whole cache of {self.kv.capacity}"
            )
        rollout.engine = self.index
        predicted = rollout.target_tokens if predicted_tokens is None else predicted_tokens
        self._predicted[rollout] = predicted
        self._predicted_total += predicted
        self._generated_total += rollout.generated
        self._queue(rollout)

    def steal(self, n: int) -> list[Rollout]:
        """Take up to n rollouts that have not started from the back of the queue (work stealing), in queue order."""
        taken: list[Rollout] = []
        while len(taken) < n and self._waiting and self._waiting[-1].generated == 0:
            rollout = self._waiting.pop()
            self.queued_tokens -= rollout.context_tokens
            self._predicted_total -= self._predicted.pop(rollout)
            taken.append(rollout)
        taken.reverse()
        if taken:
            self.telemetry.sample()
        return taken

    def pause(self, how: PauseMode) -> simpy.Event:
        """Stop admitting and pause: `drain` once the running sequences finish; `interrupt` at the next iteration
        boundary, sending them back to the front of the queue to be recomputed; `hold` at the next iteration
        boundary, keeping them and their KV cache to continue after resume (in-flight weight updates). The event
        fires once the engine is paused. A pause that stops sooner overrides one under way."""
        if self.state is PAUSED:
            return self.env.event().succeed()
        if self._pause is None:
            self._pause = PauseRequest(how, self.env.event())
        else:
            self._pause.escalate(how)
        if how != "drain" or self.state is IDLE:
            self._wake()
        return self._pause.taken

    def resume(self, version: int) -> None:
        """Continue with weights of policy `version`."""
        if self.state is not PAUSED:
            raise RuntimeError(f"engine {self.index} is not paused")
        assert self._wakeup is not None
        self.version = version
        self.state = BUSY
        self._wakeup.succeed()

    def close(self) -> None:
        """The run stops now: record the busy span still open, with the work in flight up to now, and bring the
        running rollouts' `generated` up to date."""
        batch, held = self.batch, self.tools.held
        iteration = batch.iteration + batch.unbooked(self.env.now)
        for slot in self._running.values():
            if not slot.prefill_left and slot.rollout not in held:
                slot.rollout.generated = slot.start_generated + iteration - slot.start_iteration
        self.telemetry.close(self.version)
        self.telemetry.sample()

    # ---- the engine process -----------------------------------------------------------------------------------

    def _run(self) -> Generator[simpy.Event, object, None]:
        telemetry, batch = self.telemetry, self.batch
        while True:
            preempted = self._make_room()
            if self._pause is not None and (not self._running or self._pause.mode == "hold"):
                telemetry.sample()
                yield from self._paused()
                telemetry.changed = True  # resumed
                continue
            if (self.on_queue_empty is not None and not self._waiting and self._pause is None
                    and (self._finished_since_boundary or not self._running)):
                self.on_queue_empty(self)
            self._finished_since_boundary = False
            plan = self._schedule(admit=self._pause is None and (not preempted or not self._running))
            if telemetry.changed:
                telemetry.sample()
            if plan:
                yield from self._prefill_iteration(plan)
            elif batch.size:
                # A boundary that preempted admitted nothing; the next may (a trajectory preempted in its tool call
                # leaves the queue's head free to go), so step one iteration to reach it, as the exact mode does.
                # If the head will not fit then, it will not before the batch changes either: the cache only grows.
                step_one = self.mode == "exact" or (preempted and bool(self._waiting)
                                                    and self._admissible(self._waiting[0], growth=batch.size))
                yield from self._decode_exact() if step_one else self._decode_fast()
            else:
                # Waiting rollouts may be blocked only by a pause, or by slots and KV held through tool calls.
                assert not self._waiting or self._pause is not None or self.tools.held, (
                    f"engine {self.index} idles with {len(self._waiting)} rollouts waiting")
                telemetry.flush(self.version)
                self._wakeup = self.env.event()
                self.state = IDLE
                yield self._wakeup
                self.state = BUSY

    def _paused(self) -> Generator[simpy.Event, object, None]:
        self.telemetry.flush(self.version)
        self.state = PAUSED
        resumed = self._wakeup = self.env.event()
        pause, self._pause = self._pause, None
        assert pause is not None
        pause.taken.succeed()
        yield resumed

    def _make_room(self) -> bool:
        """Boundary work before scheduling: held trajectories back from their tools resume; an interrupting pause
        empties the engine; otherwise preempt the latest admitted sequences until the next iteration's tokens fit in
        the KV cache. Whether anything was preempted."""
        if self.tools.returned:
            self.tools.resume_held(self._prefilling)
        if self._pause is not None and self._pause.mode == "interrupt" and self._running:
            for slot in reversed(list(self._running.values())):
                self._evict(slot)
                self.interruptions += 1
                self.telemetry.observe("interrupted", slot.rollout)
            self.batch.emptied()
            return False
        kv, batch = self.kv, self.batch
        kv.trim(batch.size)
        preempted = False
        # A held trajectory back from its tools reserves room for its new tokens unchecked, so even with nothing
        # decoding the cache can be over-full.
        while self._running and kv.used + batch.size > kv.capacity:
            slot = next(reversed(self._running.values()))
            self._evict(slot)
            slot.rollout.preemptions += 1
            self.preemptions += 1
            self.telemetry.observe("preempted", slot.rollout)
            preempted = True
        return preempted

    def _schedule(self, admit: bool) -> list[tuple[Slot, int]]:
        """Prefill chunks of the next iteration: the running prefills first, then admissions while allowed."""
        budget = self.max_num_batched_tokens - self.batch.size
        plan: list[tuple[Slot, int]] = []
        for slot in self._prefilling:
            if budget <= 0:
                break
            tokens = min(slot.prefill_left, budget)
            plan.append((slot, tokens))
            budget -= tokens
        while admit and budget > 0 and self._waiting and self._admissible(self._waiting[0]):
            slot = self._admit(self._waiting.popleft())
            tokens = min(slot.prefill_left, budget)
            plan.append((slot, tokens))
            budget -= tokens
        return plan

    def _admissible(self, rollout: Rollout, growth: int = 0) -> bool:
        """A free slot, and room in the KV cache for its context after the decodes of the next iteration; `growth`:
        at the boundary after the cache has grown by that many more tokens."""
        decoding = self.batch.size
        return (len(self._running) < self.max_num_seqs and decoding < self.max_num_batched_tokens
                and self.kv.fits(rollout, growth + decoding))

    def _admit(self, rollout: Rollout) -> Slot:
        self.queued_tokens -= rollout.context_tokens
        slot = Slot(rollout, self._admissions)
        self.kv.admit(slot)
        self._admissions += 1
        if rollout.admitted < 0:
            rollout.admitted = self.env.now
        rollout.admissions += 1
        self.telemetry.changed = True
        self._running[rollout] = slot
        self._prefilling.append(slot)
        self.kv.trim(self.batch.size)
        self.telemetry.observe("admitted", rollout)
        return slot

    def _prefill_iteration(self, plan: list[tuple[Slot, int]]) -> Generator[simpy.Event, object, None]:
        """One iteration mixing the decode batch with prefill chunks."""
        chunks = [PrefillChunk(tokens, slot.computed, tokens == slot.prefill_left) for slot, tokens in plan]
        telemetry, batch = self.telemetry, self.batch
        telemetry.begin(telemetry.prefill_label)
        yield self.env.timeout(self.costs.iteration_seconds(batch.size, batch.context, chunks))
        telemetry.end(self.version)
        self._advance(1, decode=False)
        telemetry.changed = True
        for slot, tokens in plan:
            slot.computed += tokens
            slot.prefill_left -= tokens
        batch.finish_due()
        prefilled = [slot for slot, _ in plan if not slot.prefill_left]
        if prefilled:
            self._prefilling = [slot for slot in self._prefilling if slot.prefill_left]
            for slot in prefilled:
                self._first_token(slot)

    def _decode_exact(self) -> Generator[simpy.Event, object, None]:
        telemetry, batch = self.telemetry, self.batch
        telemetry.begin(telemetry.decode_label)
        # One iteration of the closed form (the iteration time to rounding, from the batch's cached profile) rather
        # than re-pricing its kernels: after a preemption the fast mode steps here once per iteration, tens of
        # thousands of times in a long-tail step.
        yield self.env.timeout(self.costs.decode_k_iterations_seconds(batch.size, batch.context, 1))
        telemetry.end(self.version)
        self._advance(1, decode=True)
        batch.finish_due()

    def _decode_fast(self) -> Generator[simpy.Event, object, None]:
        """Decode the fixed batch until its first finish or a full KV cache, in one event unless woken earlier."""
        telemetry, batch, kv = self.telemetry, self.batch, self.kv
        stretch = batch.begin_stretch(self.env.now, kv.capacity - kv.used)
        telemetry.begin(telemetry.decode_label)
        self.state = DECODING
        try:
            yield self.env.timeout(stretch.seconds)
            self.state = BUSY
        except simpy.Interrupt:
            wait = batch.cut_short(self.env.now)  # the iteration in flight completes before anything changes
            if wait is not None:
                yield self.env.timeout(wait)
        telemetry.end(self.version)
        self._advance(batch.end_stretch(), decode=True)
        batch.finish_due()

    def _wake(self) -> None:
        if self.state is IDLE:
            assert self._wakeup is not None
            if not self._wakeup.triggered:
                self._wakeup.succeed()
        elif self.state is DECODING:
            self.state = BUSY  # one interrupt per stretch
            self.process.interrupt()

    # ---- book-keeping, O(1) or O(log batch) per event --------------------------------------------------------

    def _queue(self, rollout: Rollout) -> None:
        """Queue a rollout at the back: submitted, or back from tool calls that released its slot."""
        self._waiting.append(rollout)
        self.queued_tokens += rollout.context_tokens
        self.telemetry.sample()
        if self.state is IDLE or (self.state is DECODING and len(self._waiting) == 1 and self._admissible(rollout)):
            self._wake()

    def _advance(self, iterations: int, decode: bool) -> None:
        """Book `iterations` iterations: every decoding sequence gained as many tokens. Released contexts that the
        growth needed room from are evicted now, as the boundaries inside a fast stretch would have done."""
        grown = self.batch.advance(iterations, decode)
        kv = self.kv
        kv.used += grown
        self._generated_total += grown
        kv.trim(0)

    def _first_token(self, slot: Slot) -> None:
        """The last prefill chunk sampled the sequence's next token: it decodes from now on, or is done."""
        rollout = slot.rollout
        rollout.generated += 1
        self._generated_total += 1
        if rollout.version_started < 0:
            rollout.version_started = self.version  # staleness counts from the oldest token
        self.telemetry.observe("prefilled", rollout)
        if rollout.remaining <= 0:
            self._turn_end(slot)
            return
        self.batch.join(slot)

    def _turn_end(self, slot: Slot) -> None:
        """The sequence generated the last token of its turn, and is out of the decode batch: it is done, or its tool
        calls start."""
        rollout = slot.rollout
        if rollout.done:
            self._finish(slot)
            return
        assert isinstance(rollout, MultiTurnRollout)
        turn = rollout.turns[rollout.turn]
        if not self.tools.call(slot):
            del self._running[rollout]
            slot.live = False
            self.kv.release(slot)
            self._finished_since_boundary = True
        self.env.process(self._tools_return(rollout, turn.tool_s, turn.tool_tokens))

    def _tools_return(self, rollout: MultiTurnRollout, seconds: float, tokens: int) -> Generator:
        yield self.env.timeout(seconds)
        if self.tools.back(rollout, tokens):
            self._wake()  # it continues at the next boundary, like every batch change
        else:
            self._queue(rollout)

    def _finish(self, slot: Slot) -> None:
        rollout = slot.rollout
        target = rollout.target_tokens
        del self._running[rollout]
        slot.live = False
        rollout.generated = target
        self.kv.drop(slot, rollout.context_tokens)
        rollout.finished = self.env.now
        self.telemetry.changed = True
        self._generated_total -= target
        self._predicted_total -= self._predicted.pop(rollout)
        self._finished_since_boundary = True
        self.telemetry.observe("finished", rollout)
        self.on_finish(rollout)

    def _evict(self, slot: Slot) -> None:
        """Drop a running sequence's KV cache and put it back at the front of the queue, keeping its tokens."""
        rollout = slot.rollout
        del self._running[rollout]
        slot.live = False
        self.telemetry.changed = True
        if slot.prefill_left:
            self._prefilling.remove(slot)
            self.kv.drop(slot, rollout.context_tokens + 1)  # its reservation for the first token
        elif isinstance(rollout, MultiTurnRollout) and self.tools.drop(rollout):
            self.kv.drop(slot, rollout.context_tokens)
        else:
            self.batch.leave(slot)
            self.kv.drop(slot, rollout.context_tokens)
        if isinstance(rollout, MultiTurnRollout) and rollout.in_tool:
            return  # it queues again when its tools return
        self._waiting.appendleft(rollout)
        self.queued_tokens += rollout.context_tokens
