"""What an engine reports as it runs, without changing it: its samples, its busy spans and its probe.

Samples. The engine records its state (`rlsim.events.EngineSample`: running, waiting, KV tokens, decode batch, and
cumulative iterations and KV tokens read by decoding) at every boundary where its batch changed and whenever its queue
changes. Both modes record the same samples: a sample inside a fast decode stretch books the iterations completed by
then, as the exact mode has, and a boundary where nothing changed records none. A preemption chain's boundaries are
recorded when the chain is booked, at their own times (`at`): in time order for the engine, though after samples
other engines recorded since.
"""
from __future__ import annotations

from collections.abc import Callable

import simpy
from librt.vecs import vec

from rlsim.events.tables import LABEL_CODE, SampleColumns
from rlsim.sim.clock import sim_now
from rlsim.sim.engine.decode_batch import DecodeBatch, decode_read
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.running import RunningSlots
from rlsim.sim.engine.waiting import WaitingQueue
from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import Rollout

Probe = Callable[[str, Rollout], None]
"""Observes an engine without changing it: called with "admitted", "prefilled" (first token sampled), "preempted",
"interrupted", "tool_call", "tool_returned" or "finished" and the rollout concerned, at the simulated time of the
event."""


class EngineTelemetry:
    """Samples and busy spans of the engine over GPUs [first_gpu, first_gpu + gpu_count), named `unit`, reading its
    KV ledger, decode batch, running sequences and queue. `busy_labels` name its busy time: (prefill label, decode
    label, stage) — a judge pool generating verdicts is reward work, not rollout."""

    __slots__ = ("env", "recorder", "unit", "first_gpu", "gpu_count", "prefill_label", "decode_label", "stage", "probe",
                 "changed", "samples", "code", "_kv", "_batch", "_running", "_waiting", "_in_flight",
                 "_in_flight_start", "_span_label", "_span_start", "_span_step", "_span_end", "_recorded_until",
                 "_stage_code", "_unit_code")

    def __init__(self, env: simpy.Environment, recorder: Recorder, first_gpu: int, gpu_count: int, unit: str,
                 busy_labels: tuple[str, str, str], probe: Probe | None, kv: KVLedger, batch: DecodeBatch,
                 running: RunningSlots, waiting: WaitingQueue):
        self.env = env
        self.recorder = recorder
        self.unit = unit
        self.first_gpu = first_gpu
        self.gpu_count = gpu_count
        self.prefill_label, self.decode_label, self.stage = busy_labels
        self.probe = probe
        self.changed = True  # the batch changed since the last sample: the next boundary records one
        self._kv = kv
        self._batch = batch
        self._running = running
        self._waiting = waiting
        self.samples: SampleColumns = recorder.engine_samples  # the engine's samples go here, coded `code`
        self.code = self.samples.code(unit)
        self._in_flight: str | None = None  # the label of the iteration or decode stretch under way
        self._in_flight_start = 0.0
        self._span_label: str | None = None  # the busy span still open, merging consecutive work of one kind
        self._span_start = 0.0
        self._span_step = 0
        self._span_end = 0.0
        self._recorded_until = 0.0  # close() recorded busy time up to here
        # Its spans' stage and unit codes (`Recorder.coded_busy`), taken at its first span: codes go in order of first
        # use, as `Recorder.busy` would give them.
        self._stage_code = self._unit_code = -1

    def observe(self, event: str, rollout: Rollout) -> None:
        if self.probe is not None:
            self.probe(event, rollout)

    def sample(self, at: float | None = None) -> None:
        """Record the engine's state now (or at `at`, a preemption chain's boundary booked after the fact); inside a
        fast decode stretch, with the iterations completed by then."""
        self.changed = False
        kv, batch, now = self._kv, self._batch, sim_now(self.env) if at is None else at
        stretch = batch.stretch
        if stretch is None:  # at a boundary, or in an iteration whose progress the exact mode books at its end
            self.samples.add(self.code, now, len(self._running), len(self._waiting), kv.used, batch.size,
                             batch.iteration, batch.decode_iterations, batch.decode_read)
            return
        done = batch.unbooked(now)
        size = stretch.size
        self.samples.add(self.code, now, len(self._running), len(self._waiting), kv.used + size * done, size,
                         batch.iteration + done, batch.decode_iterations + done,
                         batch.decode_read + decode_read(size, stretch.context, done))

    def restarted(self, times: vec[float], first: int, stop: int, version: int) -> None:
        """A preemption chain's or prefill run's boundaries `times[first:stop]` (in time order), booked after the
        fact, each sampled by the booking (into `samples`, coded `code`): at each the work under way ended and work
        of its label began again. What `end` and `begin` at each record, in one pass: the work after the first
        boundary runs back to back, so the busy span it is part of ends at the last."""
        label = self._in_flight
        at = times[first]
        last = times[stop - 1]
        self.end(version, at)
        if stop - first > 1:
            # close() recorded busy time up to an instant the engine had settled, so up to no later than the first
            # boundary booked after it.
            assert at >= self._recorded_until
            self._in_flight, self._in_flight_start = label, at
            self.end(version, times[first + 1])
            self._span_end = last
        self._in_flight, self._in_flight_start = label, last
        self.changed = False

    def begin(self, label: str, at: float | None = None) -> None:
        """An iteration or decode stretch of `label` work starts now (or at `at`: see `sample`)."""
        self._in_flight = label
        self._in_flight_start = sim_now(self.env) if at is None else at

    def end(self, version: int, at: float | None = None) -> None:
        """The iteration or stretch under way ended now (or at `at`), on weights of policy `version`: its GPUs did its
        work from its start (or from where close() stopped recording) until then; consecutive work of one kind is one
        span."""
        label = self._in_flight
        assert label is not None
        self._in_flight = None
        end = sim_now(self.env) if at is None else at
        start, recorded = self._in_flight_start, self._recorded_until
        if recorded > start:  # max() by comparison: every iteration and stretch ends here
            start = recorded
        if end <= start:
            return
        step = self.recorder.phase.step
        if self._span_label == label and self._span_step == step and self._span_end == start:
            self._span_end = end
            return
        self.flush(version)
        self._span_label = label
        self._span_start = start
        self._span_step = step
        self._span_end = end

    def flush(self, version: int) -> None:
        """Close the open busy span: the engine stops or idles."""
        label = self._span_label
        if label is not None:
            start, end = self._span_start, self._span_end
            if end > start:
                if self._unit_code < 0:
                    self._stage_code, self._unit_code = self.recorder.span_codes(self.stage, self.unit)
                self.recorder.coded_busy(self.first_gpu, self.gpu_count, start, end, LABEL_CODE[label],
                                         self._stage_code, self._span_step, version, self._unit_code)
            self._span_label = None

    def close(self, version: int) -> None:
        """The run stops now: record the busy span still open, with the work in flight up to now (should the work go
        on, it is recorded from now when it ends)."""
        label = self._in_flight
        if label is not None:
            self.end(version)
            self.begin(label)
        self.flush(version)
        self._recorded_until = sim_now(self.env)
