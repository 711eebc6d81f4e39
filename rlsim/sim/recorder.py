"""Collects spans while the simulation runs and freezes them into an EventLog.

Processes record what GPUs *do* (busy, communication, memory spans). Idle time is labelled by cause through
*contexts*: a process that knows why GPUs may sit idle over an interval (an engine done with its share while others
still generate: `tail`; a trainer waiting for samples: `starved`; a producer held by the staleness bound:
`staleness_block`) records that interval, and freezing fills each GPU's gaps with the label of the context covering
them — `unassigned` where none does. So for every GPU the labels sum to the wall time by construction.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from rlsim.events import LABELS, EngineSample, EventLog, SequenceRecord, Span, StepRecord

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
        self._spans: list[Span] = []
        self._contexts: list[Span] = []
        self._sequences: list[SequenceRecord] = []
        self._steps: list[StepRecord] = []
        self.engine_samples: list[EngineSample] = []  # engines append theirs as the run goes on
        self.on_step: Callable[[StepRecord], None] | None = None  # told of each RL step as it ends (live output)

    def busy(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str,
             *, unit: str = "", step: int | None = None, version: int | None = None) -> None:
        """GPUs did `label` work over [start, end)."""
        if end <= start:
            return
        assert label in LABELS, label
        self._spans.append(Span(first_gpu, gpu_count, start, end, label, stage,
                                self.phase.step if step is None else step,
                                self.phase.version if version is None else version, unit))

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
        spans = self._busy_clipped(wall_s) + self._idle_spans(wall_s)
        spans.sort(key=lambda s: (s.first_gpu, s.start, s.end))
        return EventLog(spans=tuple(spans), sequences=tuple(sorted(self._sequences, key=lambda r: r.seq_id)),
                        steps=tuple(sorted(self._steps, key=lambda r: r.step)), gpus=self.gpus, wall_s=wall_s,
                        events=events, engine_samples=tuple(self.engine_samples))

    def _busy_clipped(self, wall_s: float) -> list[Span]:
        out = []
        for span in self._spans:
            if span.start >= wall_s:
                continue
            out.append(span if span.end <= wall_s else _with(span, end=wall_s))
        return out

    def _idle_spans(self, wall_s: float) -> list[Span]:
        """Fill each GPU's gaps between busy spans with the label of the latest context covering them."""
        busy_by_gpu: dict[int, list[tuple[float, float]]] = {g: [] for g in range(self.gpus)}
        for span in self._spans:
            for gpu in range(span.first_gpu, span.first_gpu + span.gpu_count):
                busy_by_gpu[gpu].append((span.start, min(span.end, wall_s)))
        contexts_by_gpu: dict[int, list[tuple[int, Span]]] = {g: [] for g in range(self.gpus)}
        for order, ctx in enumerate(self._contexts):
            for gpu in range(ctx.first_gpu, ctx.first_gpu + ctx.gpu_count):
                contexts_by_gpu[gpu].append((order, ctx))
        idle: list[Span] = []
        for gpu in range(self.gpus):
            labeller = _Labeller(gpu, contexts_by_gpu[gpu])
            cursor = 0.0
            for start, end in sorted(busy_by_gpu[gpu]):
                if start > cursor + TIME_EPS:
                    idle.extend(labeller.gap(cursor, start))
                cursor = max(cursor, end)
            if wall_s > cursor + TIME_EPS:
                idle.extend(labeller.gap(cursor, wall_s))
        return _merge_runs(idle)


class _Labeller:
    """One GPU's contexts, swept once in time order to label that GPU's gaps (which come in time order): the most
    recently recorded context covering a piece wins, and every context boundary inside a gap cuts it. Linear in the
    contexts and gaps (with a heap for the latest active context), where scanning every context for every gap grew
    with their product — quadratic in the run's length."""

    def __init__(self, gpu: int, contexts: list[tuple[int, Span]]):
        self.gpu = gpu
        self.contexts = dict(contexts)
        # (time, order, is_start): a boundary applies at its time; a piece takes the contexts active after it.
        self.events = sorted([(ctx.start, order, True) for order, ctx in contexts]
                             + [(ctx.end, order, False) for order, ctx in contexts])
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

    def gap(self, start: float, end: float) -> list[Span]:
        """[start, end) split at the context boundaries inside it, each piece labelled by its latest context."""
        self._apply_through(start)
        pieces = []
        cursor = start
        while True:
            cut = self.events[self.next][0] if self.next < len(self.events) else end
            piece_end = cut if cut < end else end
            pieces.append(self._piece(cursor, piece_end))
            if piece_end >= end:
                return pieces
            cursor = piece_end
            self._apply_through(cursor)

    def _piece(self, a: float, b: float) -> Span:
        ctx = self._owner()
        if ctx is None:
            return Span(self.gpu, 1, a, b, "unassigned", "", -1, -1)
        return Span(self.gpu, 1, a, b, ctx.label, ctx.stage, ctx.step, ctx.version, ctx.unit)


def _merge_runs(spans: list[Span]) -> list[Span]:
    """Join idle spans of neighbouring GPUs with identical content, so the log stays O(events), not O(GPUs)."""
    spans.sort(key=lambda s: (s.start, s.end, s.label, s.stage, s.step, s.unit, s.first_gpu))
    merged: list[Span] = []
    for span in spans:
        last = merged[-1] if merged else None
        if (last is not None and last.start == span.start and last.end == span.end and last.label == span.label
                and last.stage == span.stage and last.step == span.step and last.unit == span.unit
                and last.first_gpu + last.gpu_count == span.first_gpu):
            merged[-1] = _with(last, gpu_count=last.gpu_count + span.gpu_count)
        else:
            merged.append(span)
    return merged


def _with(span: Span, **changes) -> Span:
    values = {name: getattr(span, name) for name in Span.__slots__}
    values.update(changes)
    return Span(**values)
