"""Collects spans while the simulation runs and freezes them into an EventLog.

Processes record what GPUs *do* (busy, communication, memory spans). Idle time is labelled by cause through
*contexts*: a process that knows why GPUs may sit idle over an interval (an engine done with its share while others
still generate: `tail`; a trainer waiting for samples: `starved`; a producer held by the staleness bound:
`staleness_block`) records that interval, and freezing fills each GPU's gaps with the label of the context covering
them — `unassigned` where none does. So for every GPU the labels sum to the wall time by construction.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlsim.events import LABELS, EventLog, SequenceRecord, Span, StepRecord
from rlsim.events.tables import (
    LABEL_CODE,
    SPAN_COLUMNS,
    Names,
    SampleColumns,
    SpanColumns,
    SpanTable,
    group_edges,
    span_groups,
)

# Relative tolerance of float time comparisons: spans that touch within it are treated as touching.
TIME_EPS = 1e-12


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
        self._sequences: list[SequenceRecord] = []
        self._steps: list[StepRecord] = []
        self.engine_samples = SampleColumns()  # engines append theirs as the run goes on
        self.on_step: Callable[[StepRecord], None] | None = None  # told of each RL step as it ends (live output)

    def busy(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str,
             *, unit: str = "", step: int | None = None, version: int | None = None) -> None:
        """GPUs did `label` work over [start, end)."""
        if end <= start:
            return
        assert label in LABELS, label
        self._spans.append(first_gpu, gpu_count, start, end, label, stage,
                           self.phase.step if step is None else step,
                           self.phase.version if version is None else version, unit)

    def context(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str = "",
                *, unit: str = "") -> None:
        """Idle time of these GPUs within [start, end) is `label` (later contexts win where they overlap)."""
        if end <= start:
            return
        assert label in LABELS, label
        self._contexts.append(Span(first_gpu, gpu_count, start, end, label, stage, self.phase.step,
                                   self.phase.version, unit))

    def sequence(self, record: SequenceRecord) -> None:
        self._sequences.append(record)

    def step(self, record: StepRecord) -> None:
        self._steps.append(record)
        if self.on_step is not None:
            self.on_step(record)

    def freeze(self, wall_s: float, events: int) -> EventLog:
        busy = self._spans.table()
        shown = busy.start < wall_s  # work recorded past the end of the run is not in the log
        idle = self._idle_spans(busy.take(shown), wall_s)
        columns = {name: np.concatenate([getattr(busy, name)[shown], idle[name]]) for name, _ in SPAN_COLUMNS}
        columns["end"] = np.concatenate([np.minimum(busy.end[shown], wall_s), idle["end"]])
        order = np.lexsort((columns["end"], columns["start"], columns["first_gpu"]))  # stable: busy first on ties
        spans = SpanTable(**{name: values[order] for name, values in columns.items()},
                          stage_names=tuple(self._spans.stages.names), unit_names=tuple(self._spans.units.names))
        # The log holds its own copy in time order: let the recorded columns go (a long run's are hundreds of MB).
        del busy, columns
        self._spans = SpanColumns(self._spans.stages, self._spans.units)
        return EventLog(spans=spans, sequences=tuple(sorted(self._sequences, key=lambda r: r.seq_id)),
                        steps=tuple(sorted(self._steps, key=lambda r: r.step)), gpus=self.gpus, wall_s=wall_s,
                        events=events, engine_samples=self.engine_samples.table().in_time_order())

    def _idle_spans(self, busy: SpanTable, wall_s: float) -> dict[str, np.ndarray]:
        """Fill each GPU's gaps between busy spans with the label of the latest context covering them, as columns
        (codes into this recorder's stage and unit names), runs of neighbouring GPUs with identical pieces merged.
        GPUs between two edges of spans or contexts have identical timelines, so each such group is swept once."""
        context_edges = [edge for c in self._contexts for edge in (c.first_gpu, c.first_gpu + c.gpu_count)]
        edges = group_edges(busy, self.gpus, context_edges)
        pieces = _Pieces()
        for (first_gpu, gpu_count), sweep, gaps in _group_gaps(busy, wall_s, edges, self._contexts):
            if sweep is None:
                pieces.unassigned(first_gpu, gpu_count, gaps)
                continue
            labeller = _Labeller(sweep)
            for start, end in gaps:
                for a, b, ctx in labeller.gap(start, end):
                    pieces.add(first_gpu, gpu_count, a, b, ctx)
        return pieces.merged(self._spans.stages, self._spans.units)


def _group_gaps(busy: SpanTable, wall_s: float, edges: np.ndarray, contexts: list[Span]):
    """Per group of GPUs between two `edges`: its GPUs, its contexts' sweep (None when none covers it) and the gaps
    between its busy spans up to wall_s, in time order. Spans are expanded to one row per group they cover and sorted
    once; a group's gaps are where a span starts after the latest end before it (by more than TIME_EPS)."""
    span, group = span_groups(busy, edges)
    start = busy.start[span]
    end = np.minimum(busy.end[span], wall_s)
    order = np.lexsort((end, start, group))
    group, start, end = group[order], start[order], end[order]
    groups = edges.size - 1
    bounds = np.searchsorted(group, np.arange(groups + 1))
    # Groups between the same two context edges are covered by the same contexts: they share one sweep.
    context_edges = sorted({0} | {edge for c in contexts for edge in (c.first_gpu, c.first_gpu + c.gpu_count)})
    sweeps: dict[int, _ContextSweep | None] = {}
    for g in range(groups):
        first_gpu, after = int(edges[g]), int(edges[g + 1])
        segment = bisect_right(context_edges, first_gpu) - 1
        if segment not in sweeps:
            covering = [(order, c) for order, c in enumerate(contexts)
                        if c.first_gpu <= first_gpu < c.first_gpu + c.gpu_count]
            sweeps[segment] = _ContextSweep(covering) if covering else None
        a, b = bounds[g], bounds[g + 1]
        cursor = np.maximum.accumulate(np.concatenate([[0.0], end[a:b]]))  # the latest end before each span, then all
        starts = start[a:b]
        opens = starts > cursor[:-1] + TIME_EPS
        gaps = list(zip(cursor[:-1][opens].tolist(), starts[opens].tolist(), strict=True))
        last = float(cursor[-1])
        if wall_s > last + TIME_EPS:
            gaps.append((last, wall_s))
        yield (first_gpu, after - first_gpu), sweeps[segment], gaps


class _ContextSweep:
    """Contexts (with their order of recording) as time-ordered boundaries, shared by the GPUs they all cover."""

    def __init__(self, contexts: list[tuple[int, Span]]):
        self.contexts = dict(contexts)
        # (time, order, is_start): a boundary applies at its time; a piece takes the contexts active after it.
        self.events = sorted([(ctx.start, order, True) for order, ctx in contexts]
                             + [(ctx.end, order, False) for order, ctx in contexts])


class _Labeller:
    """One GPU's contexts, swept once in time order to label that GPU's gaps (which come in time order): the most
    recently recorded context covering a piece wins, and every context boundary inside a gap cuts it. Linear in the
    contexts and gaps (with a heap for the latest active context), where scanning every context for every gap grew
    with their product — quadratic in the run's length."""

    def __init__(self, sweep: _ContextSweep):
        self.contexts = sweep.contexts
        self.events = sweep.events
        self.next = 0
        self.active: set[int] = set()
        self.latest: list[int] = []  # max-heap of active orders (negated), stale entries dropped lazily

    def _apply_through(self, time: float) -> None:
        events = self.events
        while self.next < len(events) and events[self.next][0] <= time:
            _, order, starts = events[self.next]
            if starts:
                self.active.add(order)
                heapq.heappush(self.latest, -order)
            else:
                self.active.discard(order)
            self.next += 1

    def _owner(self) -> Span | None:
        while self.latest and -self.latest[0] not in self.active:
            heapq.heappop(self.latest)
        return self.contexts[-self.latest[0]] if self.latest else None

    def gap(self, start: float, end: float) -> list[tuple[float, float, Span | None]]:
        """[start, end) split at the context boundaries inside it, each piece with its latest context (None: none)."""
        self._apply_through(start)
        pieces = []
        cursor = start
        while True:
            cut = self.events[self.next][0] if self.next < len(self.events) else end
            piece_end = cut if cut < end else end
            pieces.append((cursor, piece_end, self._owner()))
            if piece_end >= end:
                return pieces
            cursor = piece_end
            self._apply_through(cursor)


class _Pieces:
    """Idle pieces of groups of GPUs as they are labelled, then merged into spans over runs of GPUs."""

    def __init__(self) -> None:
        self.gpu: list[int] = []
        self.count: list[int] = []
        self.start: list[float] = []
        self.end: list[float] = []
        self.context: list[Span | None] = []

    def unassigned(self, first_gpu: int, gpu_count: int, gaps: list[tuple[float, float]]) -> None:
        self.gpu.extend([first_gpu] * len(gaps))
        self.count.extend([gpu_count] * len(gaps))
        self.start.extend(a for a, _ in gaps)
        self.end.extend(b for _, b in gaps)
        self.context.extend([None] * len(gaps))

    def add(self, first_gpu: int, gpu_count: int, start: float, end: float, context: Span | None) -> None:
        self.gpu.append(first_gpu)
        self.count.append(gpu_count)
        self.start.append(start)
        self.end.append(end)
        self.context.append(context)

    def merged(self, stages: Names, units: Names) -> dict[str, np.ndarray]:
        """Join pieces of neighbouring GPUs with identical content (times, label, stage, step, unit), so the log
        stays O(events), not O(GPUs); a run keeps its first GPU's version."""
        unassigned = (LABEL_CODE["unassigned"], stages.code(""), -1, -1, units.code(""))
        coded = {id(c): (LABEL_CODE[c.label], stages.code(c.stage), c.step, c.version, units.code(c.unit))
                 for c in self.context if c is not None}
        fields = np.array([unassigned if c is None else coded[id(c)] for c in self.context],
                          dtype=np.int64).reshape(-1, 5)
        label, stage, step, version, unit = fields.T
        gpu, count = np.array(self.gpu, dtype=np.int64), np.array(self.count, dtype=np.int64)
        start, end = np.array(self.start, dtype=np.float64), np.array(self.end, dtype=np.float64)
        order = np.lexsort((gpu, unit, step, stage, label, end, start))
        gpu, count, start, end = gpu[order], count[order], start[order], end[order]
        label, stage, step, version, unit = label[order], stage[order], step[order], version[order], unit[order]
        same = ((start[1:] == start[:-1]) & (end[1:] == end[:-1]) & (label[1:] == label[:-1])
                & (stage[1:] == stage[:-1]) & (step[1:] == step[:-1]) & (unit[1:] == unit[:-1])
                & (gpu[1:] == gpu[:-1] + count[:-1]))
        # A run continues while the next piece is identical on the GPUs right after the previous piece's.
        first = np.flatnonzero(np.concatenate([[True], ~same])) if gpu.size else np.zeros(0, dtype=np.int64)
        run_count = np.add.reduceat(count, first) if gpu.size else count
        return {"first_gpu": gpu[first].astype(np.int32), "gpu_count": run_count.astype(np.int32),
                "start": start[first], "end": end[first], "label": label[first].astype(np.int8),
                "stage": stage[first].astype(np.int16), "step": step[first].astype(np.int32),
                "version": version[first].astype(np.int32), "unit": unit[first].astype(np.int32)}
