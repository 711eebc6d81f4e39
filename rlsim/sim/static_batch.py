"""HF-generate rollout engines (`placement.rollout.engine: hf`): static batches, as Hugging Face transformers'
`model.generate()` runs them — DeepSpeed-Chat's baseline, and RLHF frameworks before they adopted vLLM.

Between two batches the engine takes queued rollouts, first come, first served, up to `max_num_seqs` rows and as many
as its KV budget holds when every row is as long as the batch's longest context (prompts are left-padded to it) plus
`max_new_tokens`: HF's cache is one contiguous tensor per layer, a row for every sequence. It prefills them together,
rows × longest tokens in one forward pass, and decodes the whole batch until its longest turn ends: a row whose
sequence finished stays in the batch as padding, computed and attending to its padded cache at every step. Nothing is
admitted, preempted or interrupted in between, and `generate()` returns every row at once, when the batch is done.
A pause of any kind is taken between batches.

Fast advance: a batch's decode is one fixed batch whose total context grows by its rows each iteration, so its time is
the closed form the continuous-batching engine uses (`decode_k_iterations_seconds`), slept through in one event;
`mode="exact"` steps every iteration instead. Events scale with batches and sequences, never with tokens.

A multi-turn trajectory's turn ends with its batch; its tool calls run, and it queues again with the tool responses
appended, to be prefilled whole in a later batch (a `generate()` call keeps no cache for the next).
"""
from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Literal

import simpy
from mypy_extensions import i64

from rlsim.costs.rollout import IterationCosts, PrefillChunk
from rlsim.sim.clock import sim_now
from rlsim.sim.engine.controls import EngineControls
from rlsim.sim.engine.decode_batch import DecodeBatch
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.state import BUSY, EngineState, PauseMode
from rlsim.sim.engine.telemetry import EngineTelemetry, Probe
from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import MultiTurnRollout, Rollout


class StaticBatchEngine(EngineControls):
    """A static-batching generation engine over GPUs [first_gpu, first_gpu + gpu_count), with a KV budget of
    `kv_capacity_tokens` tokens; each row reserves its batch's longest context (at least `padded_prompt` tokens: a
    framework that pads every prompt to its maximum) plus `max_new_tokens`.

    The same face as `rlsim.sim.rollout.RolloutEngine` to the controller, the balancers and the metrics: `on_finish`
    is called for each rollout that reaches its target, `on_queue_empty` (work stealing) when its queue runs dry.
    """

    __slots__ = ("max_new_tokens", "padded_prompt", "kv", "batch", "telemetry", "state", "tool_calls", "_predicted",
                 "_predicted_total", "_generated_total", "_queued_tokens", "_admissions")

    def __init__(self, env: simpy.Environment, index: int, costs: IterationCosts, kv_capacity_tokens: int,
                 max_num_seqs: int, max_new_tokens: int, first_gpu: int, gpu_count: int, recorder: Recorder,
                 on_finish: Callable[[Rollout], None], mode: Literal["fast", "exact"] = "fast",
                 probe: Probe | None = None, busy_labels: tuple[str, str, str] = ("prefill", "decode", "gen"),
                 unit: str | None = None, padded_prompt: int = 0):
        if kv_capacity_tokens < 1 or max_num_seqs < 1 or max_new_tokens < 1:
            raise ValueError(f"engine {index}: kv_capacity_tokens, max_num_seqs and max_new_tokens must be >= 1, got "
                             f"{kv_capacity_tokens}, {max_num_seqs}, {max_new_tokens}")
        self._set_common(env, index, costs, max_num_seqs, first_gpu, gpu_count, mode, on_finish)
        self.max_new_tokens = max_new_tokens
        self.padded_prompt = padded_prompt
        self.tool_calls = 0  # turns that ended in tool calls
        self._predicted: dict[Rollout, float] = {}  # outstanding rollouts' predicted lengths (length-aware balancing)
        self._predicted_total = 0.0
        self._generated_total = 0  # tokens the outstanding rollouts generated, padding rows' steps included (booked)
        self._queued_tokens = 0  # context tokens of the waiting rollouts
        self._admissions = 0
        # The ledger only counts the padded cache (no prefix sharing: every row holds its own prompt); the decode
        # batch keeps the iteration counters and the stretch the telemetry reads.
        self.kv = KVLedger(kv_capacity_tokens, sharing=False)
        self.batch = DecodeBatch(costs, _rows_leave_with_their_batch)
        self.telemetry = EngineTelemetry(env, recorder, first_gpu, gpu_count,
                                         unit if unit is not None else f"engine{index}", busy_labels, probe, self.kv,
                                         self.batch, self._running, self._waiting)
        self.state = EngineState(env, self._run())

    # ---- what the controller and balancers use ----------------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def queued_tokens(self) -> int:
        """Context tokens of the waiting rollouts."""
        return self._queued_tokens

    @property
    def kv_used_tokens(self) -> int:
        """KV-cache tokens the batch's padded rows hold after the iterations completed so far."""
        batch = self.batch
        return self.kv.used + batch.size * batch.unbooked(sim_now(self.env))

    @property
    def predicted_work(self) -> float:
        """Predicted tokens still to generate; a padding row's steps count as generating."""
        batch = self.batch
        return self._predicted_total - self._generated_total - float(batch.size * batch.unbooked(sim_now(self.env)))

    def submit(self, rollout: Rollout, predicted_tokens: float | None = None) -> None:
        """Queue `rollout` (first come, first served); `predicted_tokens`: its predicted length (None: its target)."""
        if rollout.done:
            raise ValueError(f"rollout {rollout.seq_id} already has its {rollout.target_tokens} tokens")
        if rollout.peak_context_tokens > self.kv.capacity:
            raise ValueError(f"rollout {rollout.seq_id} needs {rollout.peak_context_tokens} KV tokens, more than "
                             f"engine {self.index}'s whole cache of {self.kv.capacity}")
        rollout.engine = self.index
        predicted = rollout.target_tokens if predicted_tokens is None else predicted_tokens
        self._predicted[rollout] = predicted
        self._predicted_total += predicted
        self._generated_total += rollout.generated
        self._queue(rollout)

    def steal(self, n: int) -> list[tuple[Rollout, float]]:
        """Take up to n rollouts that have not started from the back of the queue (work stealing), in queue order,
        each with its predicted length."""
        taken: list[tuple[Rollout, float]] = []
        waiting = self._waiting
        while len(taken) < n and waiting and waiting[-1].generated == 0:
            rollout = waiting.pop()
            self._queued_tokens -= rollout.context_tokens
            predicted = self._predicted.pop(rollout)
            self._predicted_total -= predicted
            taken.append((rollout, predicted))
        taken.reverse()
        if taken:
            self.telemetry.sample()
        return taken

    def pause(self, how: PauseMode) -> simpy.Event:
        """Stop admitting and pause once the batch under way is done, whatever `how` asks: generate() returns only
        with its whole batch. The event fires once the engine is paused."""
        return self.state.ask_pause(how)

    def close(self) -> None:
        """The run stops now: record the busy span still open, and bring the rows' `generated` up to date."""
        steps = self.batch.iteration + self.batch.unbooked(sim_now(self.env))
        for slot in self._running.in_admission_order():
            rollout = slot.rollout
            if not slot.prefill_left:
                rollout.generated = min(slot.start_generated + steps - slot.start_iteration,
                                        slot.start_generated + rollout.remaining)
        self.telemetry.close(self.version)
        self.telemetry.sample()

    def settle(self) -> None:
        """Nothing is planned ahead of simulated time (the continuous-batching engine books preemption chains)."""

    # ---- the engine process -----------------------------------------------------------------------------------

    def _run(self) -> Generator[simpy.Event, object, None]:
        telemetry, state = self.telemetry, self.state
        while True:
            if state.pause is not None:
                telemetry.sample()
                telemetry.flush(self.version)
                yield state.take_pause()
                telemetry.changed = True  # resumed
                continue
            if self.on_queue_empty is not None and not self._waiting:
                self.on_queue_empty(self)
            if not self._waiting:
                if telemetry.changed:
                    telemetry.sample()
                telemetry.flush(self.version)
                yield state.idle()
                state.activity = BUSY
                continue
            yield from self._generate(self._take_batch())

    def _take_batch(self) -> list[Slot]:
        """The next batch's rows: queued rollouts first come, first served, while a row is free and every row, padded
        to the longest context, fits the KV budget with `max_new_tokens` more; at least one."""
        waiting, capacity = self._waiting, self.kv.capacity
        rows: list[Slot] = []
        longest = self.padded_prompt
        while waiting and len(rows) < self.max_num_seqs:
            padded = max(longest, waiting[0].context_tokens)
            if rows and (len(rows) + 1) * (padded + self.max_new_tokens) > capacity:
                break
            longest = padded
            rollout = waiting.popleft()
            slot = Slot(rollout, self._admissions)
            self._admissions += 1
            if rollout.admitted < 0:
                rollout.admitted = sim_now(self.env)
            rollout.admissions += 1
            self._queued_tokens -= rollout.context_tokens
            self._running.add(slot)
            self.telemetry.observe("admitted", rollout)
            rows.append(slot)
        for slot in rows:
            slot.prefill_left = slot.computed = longest  # every row is prefilled to the padded context
        return rows

    def _generate(self, rows: list[Slot]) -> Generator[simpy.Event, object, None]:
        """One generate() call: prefill the padded prompts together, decode until the longest turn ends, return all."""
        telemetry, batch, kv, env = self.telemetry, self.batch, self.kv, self.env
        longest = rows[0].computed
        telemetry.changed = True
        telemetry.sample()
        telemetry.begin(telemetry.prefill_label)
        kv.used = len(rows) * (longest + 1)  # the padded prompts, and room for the token each samples
        yield env.timeout(self.costs.iteration_seconds(prefill=[PrefillChunk(longest)] * len(rows)))
        telemetry.end(self.version)
        # Each row sampled its first token, whose KV the first decode step writes: that step attends to the padded
        # prompts and to it, as a continuous-batching engine's sequence joins its decode batch.
        self._advance(1, decode=False)
        self._generated_total += len(rows)
        batch.pad(len(rows), len(rows) * longest)
        steps = max(slot.rollout.remaining for slot in rows)
        for slot in rows:
            slot.prefill_left = 0
            slot.start_iteration = batch.iteration - 1
            slot.start_generated = slot.rollout.generated
            rollout = slot.rollout
            if rollout.version_started < 0:
                rollout.version_started = self.version  # staleness counts from the oldest token
            telemetry.observe("prefilled", rollout)
        telemetry.changed = True
        telemetry.sample()
        if steps > 1:
            yield from self._decode(steps - 1) if self.mode == "fast" else self._decode_exact(steps - 1)
        self._return(rows)

    def _decode(self, iterations: int) -> Generator[simpy.Event, object, None]:
        """The batch's decode in one event: nothing can join or stop it before it ends."""
        batch, telemetry, env = self.batch, self.telemetry, self.env
        seconds = self.costs.decode_k_iterations_seconds(batch.size, float(batch.context), iterations)
        batch.planned_stretch(sim_now(env), iterations, seconds)
        telemetry.begin(telemetry.decode_label)
        yield env.timeout(seconds)
        telemetry.end(self.version)
        self._advance(batch.end_stretch(), decode=True)

    def _decode_exact(self, iterations: int) -> Generator[simpy.Event, object, None]:
        batch, telemetry, env = self.batch, self.telemetry, self.env
        for _ in range(iterations):
            telemetry.begin(telemetry.decode_label)
            yield env.timeout(self.costs.decode_k_iterations_seconds(batch.size, float(batch.context), 1))
            telemetry.end(self.version)
            self._advance(1, decode=True)

    def _advance(self, iterations: i64, decode: bool) -> None:
        grown = self.batch.advance(iterations, decode)
        self.kv.used += grown
        self._generated_total += grown

    def _return(self, rows: list[Slot]) -> None:
        """generate() returns: every row's turn is over at once; the padded cache is freed."""
        batch, kv = self.batch, self.kv
        self._generated_total -= batch.size * (batch.iteration - rows[0].start_iteration)
        batch.pad(0, 0)
        kv.used = 0
        self.telemetry.changed = True
        for slot in rows:
            rollout = slot.rollout
            self._running.remove(slot)
            slot.live = False
            rollout.generated += rollout.remaining
            if rollout.done:
                self._predicted_total -= self._predicted.pop(rollout)
                self._generated_total -= slot.start_generated
                rollout.finished = sim_now(self.env)
                self.telemetry.observe("finished", rollout)
                self.environment.finished(rollout)
                self.on_finish(rollout)
            else:
                self._generated_total += rollout.generated - slot.start_generated
                self._tool_calls(rollout)
        self.telemetry.sample()

    def _tool_calls(self, rollout: Rollout) -> None:
        """The trajectory's turn ended in tool calls: it queues again, its context grown, once they return."""
        assert isinstance(rollout, MultiTurnRollout)
        turn = rollout.turns[rollout.turn]
        rollout.in_tool = True
        self.tool_calls += 1
        self.telemetry.observe("tool_call", rollout)
        self.env.process(self._tools_return(rollout, turn.call_s, turn.tool_tokens))

    def _tools_return(self, rollout: MultiTurnRollout, call_s: tuple[float, ...], tokens: int) -> Generator:
        yield from self.environment.calls(self, rollout, call_s)
        rollout.in_tool = False
        rollout.turn += 1
        rollout.appended += tokens
        self.telemetry.observe("tool_returned", rollout)
        self._queue(rollout)

    def _queue(self, rollout: Rollout) -> None:
        self._waiting.append(rollout)
        self._queued_tokens += rollout.context_tokens
        self.telemetry.sample()
        self.state.wake()  # only an idle engine starts a batch now; a busy one takes it after its batch


def _rows_leave_with_their_batch(slot: Slot) -> None:
    """The decode batch's turn-end callback, never called: rows never join its finish heap, they leave together."""
