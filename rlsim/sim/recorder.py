"""Collects spans while the simulation runs and freezes them into an EventLog.

Processes record what GPUs *do* (busy, communication, memory spans). Idle time is labelled by cause through
*contexts*: a process that knows why GPUs may sit idle over an interval (an engine done with its share while others
still generate: `tail`; a trainer waiting for samples: `starved`; a producer held by the staleness bound:
`staleness_block`) records that interval, and freezing fills each GPU's gaps with the label of the context covering
them — `unassigned` where none does (rlsim.sim.idle_labels). So for every GPU the labels sum to the wall time by
construction.

Engine samples, the largest table, stay in memory up to SAMPLES_KEPT_IN_MEMORY; past that they are spilled to disk at
the end of an RL step whenever SAMPLES_PER_CHUNK have gathered (rlsim.events.sample_spill), so a long run holds a
chunk of samples rather than the run's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlsim.events import LABELS, EventLog, KVTransfer, Span, StepRecord
from rlsim.events.agents import AgentRecord
from rlsim.events.environments import EnvironmentRecord
from rlsim.events.sample_spill import SampleSpill, SpilledSamples
from rlsim.events.tables import SPAN_COLUMNS, SampleColumns, SampleTable, SequenceColumns, SpanColumns, SpanTable
from rlsim.sim.idle_labels import idle_spans

# Engine samples a run keeps in memory before it spills them to disk: 2^18 samples are 18 MB of columns (68 bytes a
# sample, rlsim.events.tables), a run of ~50 RL steps on 1,024 GPUs (benchmarks/bench_horizon records ~4,700 samples a
# step); every shipped scenario and test run stays below it and reads its samples from memory.
SAMPLES_KEPT_IN_MEMORY = 2**18
# Samples per spilled chunk once a run spills: 4 MB of columns. A metric reads an engine's samples as one slice of
# every chunk, so chunks of a step each (~5,000 samples on 1,024 GPUs) would cost a file read per engine and step.
SAMPLES_PER_CHUNK = 2**16


@dataclass
class Phase:
    """What the RL loop is doing now, read by processes to tag their spans."""

    step: int = 0
    version: int = 0


class Recorder:
    def __init__(self, gpus: int):
        self.gpus = gpus
        self.phase = Phase()
        self._spans = SpanColumns()
        self._contexts: list[Span] = []
        self._late_contexts: list[Span] = []  # win over every other context (their own order kept among them)
        self.sequences = SequenceColumns()  # the ledger appends each sequence as its step records it
        self._steps: list[StepRecord] = []
        self._kv_transfers: list[KVTransfer] = []
        self.engine_samples = SampleColumns()  # engines append theirs as the run goes on
        self.on_step: Callable[[StepRecord], None] | None = None  # told of each RL step as it ends (live output)
        # What the run's environment pool did up to the wall time (None: no pool), asked for when the log freezes.
        self.environments: Callable[[float], EnvironmentRecord | None] | None = None
        self.agents: tuple[AgentRecord, ...] = ()  # a multi-agent run's, written when its loop ends
        # Taken when the recorder is made: a test sets them small to spill at every step.
        self._samples_kept, self._samples_per_chunk = SAMPLES_KEPT_IN_MEMORY, SAMPLES_PER_CHUNK
        self._sample_spill: SampleSpill | None = None  # made once the samples outgrow memory

    def busy(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str,
             *, unit: str = "", step: int | None = None, version: int | None = None) -> None:
        """GPUs did `label` work over [start, end)."""
        if end <= start:
            return
        assert label in LABELS, label
        self._spans.append(first_gpu, gpu_count, start, end, label, stage,
                           self.phase.step if step is None else step,
                           self.phase.version if version is None else version, unit)

    def span_codes(self, stage: str, unit: str) -> tuple[int, int]:
        """The codes `coded_busy` takes for `stage` and `unit`."""
        return self._spans.stages.code(stage), self._spans.units.code(unit)

    def coded_busy(self, first_gpu: int, gpu_count: int, start: float, end: float, label: int, stage: int, step: int,
                   version: int, unit: int) -> None:
        """`busy` with the label coded (`LABEL_CODE`), the stage and unit by `span_codes`, and the step and version
        given: an engine's telemetry records a span at every change of its work's kind."""
        if end > start:
            self._spans.add(first_gpu, gpu_count, start, end, label, stage, step, version, unit)

    def context(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str = "",
                *, unit: str = "") -> None:
        """Idle time of these GPUs within [start, end) is `label` (later contexts win where they overlap)."""
        if end <= start:
            return
        assert label in LABELS, label
        self._contexts.append(Span(first_gpu, gpu_count, start, end, label, stage, self.phase.step,
                                   self.phase.version, unit))

    def late_context(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str = "",
                     *, unit: str = "") -> None:
        """Like `context`, but over every context recorded before or after it: for a cause known only per engine
        (it waits on its trajectories' tool calls) inside a phase the controller labels later (a generation tail)."""
        contexts = self._contexts
        self._contexts = self._late_contexts
        try:
            self.context(first_gpu, gpu_count, start, end, label, stage, unit=unit)
        finally:
            self._contexts = contexts

    def kv_transfer(self, record: KVTransfer) -> None:
        self._kv_transfers.append(record)

    def step(self, record: StepRecord) -> None:
        self._steps.append(record)
        self._spill_samples()
        if self.on_step is not None:
            self.on_step(record)

    def _spill_samples(self) -> None:
        """Spill the samples in memory to disk once they outgrow it, and from then on a chunk at a time."""
        gathered = len(self.engine_samples)
        if gathered < max(self._samples_kept if self._sample_spill is None else self._samples_per_chunk, 1):
            return
        if self._sample_spill is None:
            self._sample_spill = SampleSpill()
        self._sample_spill.spill(self.engine_samples)

    def freeze(self, wall_s: float, events: int) -> EventLog:
        """The log of the run up to wall_s. The recorder's columns are handed over, not kept beside the log's (a long
        run's are hundreds of MB); it records nothing after this."""
        spans = self._frozen_spans(wall_s)
        samples = self._frozen_samples()
        self._spans, self.engine_samples = SpanColumns(self._spans.stages, self._spans.units), SampleColumns()
        records = self.sequences.table()
        self.sequences = SequenceColumns()
        sequences = records.take(np.argsort(records.seq_id, kind="stable"))
        environments = self.environments(wall_s) if self.environments is not None else None
        return EventLog(spans=spans, sequences=sequences,
                        steps=tuple(sorted(self._steps, key=lambda r: r.step)), gpus=self.gpus, wall_s=wall_s,
                        events=events, engine_samples=samples, kv_transfers=tuple(self._kv_transfers),
                        environments=environments, agents=self.agents)

    def _frozen_samples(self) -> SampleTable | SpilledSamples:
        """The engine samples: in memory, as recorded (sorted by time when iterated), or on disk when the run spilled
        them."""
        if self._sample_spill is None:
            return self.engine_samples.table()
        self._sample_spill.spill(self.engine_samples)
        names = tuple(self.engine_samples.engines.names)
        spill, self._sample_spill = self._sample_spill, None
        return SpilledSamples(spill, names)

    def _frozen_spans(self, wall_s: float) -> SpanTable:
        """Busy spans that start in the run (clipped to it) and the idle spans between them, by GPU then time, busy
        first on ties. Built a column at a time, so at most one unsorted column is held beside the sorted ones."""
        busy = self._spans.table()
        shown = busy.start < wall_s  # work recorded past the end of the run is not in the log
        if not shown.all():
            busy = busy.take(shown)
        idle = idle_spans(busy, wall_s, self.gpus, self._contexts + self._late_contexts, self._spans.stages,
                          self._spans.units)
        first_gpu = np.concatenate([busy.first_gpu, idle["first_gpu"]])
        start = np.concatenate([busy.start, idle["start"]])
        end = np.concatenate([np.minimum(busy.end, wall_s), idle["end"]])
        order = np.lexsort((end, start, first_gpu))  # stable: busy first on ties
        columns = {"first_gpu": first_gpu[order], "start": start[order], "end": end[order]}
        del first_gpu, start, end
        for name, _ in SPAN_COLUMNS:
            if name not in columns:
                columns[name] = np.concatenate([getattr(busy, name), idle[name]])[order]
        return SpanTable(**columns, stage_names=tuple(self._spans.stages.names),
                         unit_names=tuple(self._spans.units.names))
