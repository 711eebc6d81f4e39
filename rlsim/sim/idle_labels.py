"""Idle time labelled by cause: each GPU's gaps between busy spans take the label of the latest-recorded context
covering them (`unassigned` where none does), so for every GPU the labels sum to the wall time by construction.

GPUs between two edges of spans or contexts have identical timelines, so each such group is swept once, a pass of
GROUPS_PER_PASS groups at a time (the pieces held before merging are a slice of the run's, however many GPUs the
cluster has); neighbouring GPUs with identical pieces are merged into one span, so the log stays O(events), not
O(GPUs).
"""
from __future__ import annotations

import heapq
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator

import numpy as np

from rlsim.events import Span
from rlsim.events.tables import LABEL_CODE, SPAN_COLUMNS, CoveringSpans, Names, SpanTable, group_edges

# GPU groups swept per pass: a pass holds its groups' idle pieces until they are merged.
GROUPS_PER_PASS = 256
# Relative tolerance of float time comparisons: spans that touch within it are treated as touching.
TIME_EPS = 1e-12


def idle_spans(busy: SpanTable, wall_s: float, gpus: int, contexts: list[Span], stages: Names,
           units: Names) -> dict[str, np.ndarray]:
    """Fill each GPU's gaps between busy spans with the label of the latest context covering them, as columns
    (codes into `stages` and `units`), runs of neighbouring GPUs with identical pieces merged.
    GPUs between two edges of spans or contexts have identical timelines, so each such group is swept once; the
    groups are swept GROUPS_PER_PASS at a time, so the pieces held before merging are a slice of the run's."""
    context_edges = [edge for c in contexts for edge in (c.first_gpu, c.first_gpu + c.gpu_count)]
    covering = CoveringSpans(busy, group_edges(busy, gpus, context_edges))
    passes = [_idle_pass(covering, wall_s, range(lo, min(lo + GROUPS_PER_PASS, len(covering))), contexts, stages,
                         units)
              for lo in range(0, len(covering), GROUPS_PER_PASS)]
    if len(passes) == 1:
        return passes[0]
    # Runs of identical pieces may continue from one pass's GPUs into the next: merge once more over all.
    return _merged_runs({name: np.concatenate([p[name] for p in passes]) for name, _ in SPAN_COLUMNS})


def _idle_pass(covering: CoveringSpans, wall_s: float, groups: range, contexts: list[Span], stages: Names,
               units: Names) -> dict[str, np.ndarray]:
    """The merged idle pieces of `groups`."""
    pieces = _Pieces()
    for (first_gpu, gpu_count), sweep, gap_starts, gap_ends in _group_gaps(covering, wall_s, groups, contexts):
        if sweep is None:
            pieces.unassigned(first_gpu, gpu_count, gap_starts, gap_ends)
            continue
        labeller = _Labeller(sweep)
        add = pieces.adder(first_gpu, gpu_count)
        for start, end in zip(gap_starts.tolist(), gap_ends.tolist(), strict=True):
            for a, b, order in labeller.gap(start, end):
                add(a, b, order)
    return pieces.merged(contexts, stages, units)


def _group_gaps(covering: CoveringSpans, wall_s: float, groups: range,
                contexts: list[Span]) -> Iterator[tuple[tuple[int, int], _ContextSweep | None, np.ndarray, np.ndarray]]:
    """Per group of GPUs in `groups`: its GPUs, its contexts' sweep (None when none covers it) and the gaps between
    its busy spans up to wall_s (their starts and ends), in time order. A group's gaps are where a span starts after
    the latest end before it (by more than TIME_EPS)."""
    busy, edges = covering.spans, covering.edges
    # Groups between the same two context edges are covered by the same contexts: they share one sweep.
    context_edges = sorted({0} | {edge for c in contexts for edge in (c.first_gpu, c.first_gpu + c.gpu_count)})
    sweeps: dict[int, _ContextSweep | None] = {}
    for g in groups:
        first_gpu, after = int(edges[g]), int(edges[g + 1])
        segment = bisect_right(context_edges, first_gpu) - 1
        if segment not in sweeps:
            covered_by = [(order, c) for order, c in enumerate(contexts)
                          if c.first_gpu <= first_gpu < c.first_gpu + c.gpu_count]
            sweeps[segment] = _ContextSweep(covered_by) if covered_by else None
        mine = covering.of(g)  # by start (then end): the order the gaps are read in
        starts = busy.start[mine]
        cursor = np.maximum.accumulate(np.concatenate([[0.0], np.minimum(busy.end[mine], wall_s)]))  # latest end so far
        opens = starts > cursor[:-1] + TIME_EPS
        gap_starts, gap_ends = cursor[:-1][opens], starts[opens]
        if wall_s > cursor[-1] + TIME_EPS:
            gap_starts, gap_ends = np.append(gap_starts, cursor[-1]), np.append(gap_ends, wall_s)
        yield (first_gpu, after - first_gpu), sweeps[segment], gap_starts, gap_ends


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

    def _owner(self) -> int:
        while self.latest and -self.latest[0] not in self.active:
            heapq.heappop(self.latest)
        return -self.latest[0] if self.latest else -1

    def gap(self, start: float, end: float) -> list[tuple[float, float, int]]:
        """[start, end) split at the context boundaries inside it, each piece with the order of its latest context
        (-1: none)."""
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
    """Idle pieces of groups of GPUs as they are labelled (compact columns: a long run has millions), then merged into
    spans over runs of GPUs."""

    def __init__(self) -> None:
        self.gpu, self.count, self.context = array("q"), array("q"), array("q")  # context: its order, -1 for none
        self.start, self.end = array("d"), array("d")

    def unassigned(self, first_gpu: int, gpu_count: int, starts: np.ndarray, ends: np.ndarray) -> None:
        pieces = starts.size
        self.gpu.frombytes(np.full(pieces, first_gpu, dtype=np.int64).tobytes())
        self.count.frombytes(np.full(pieces, gpu_count, dtype=np.int64).tobytes())
        self.context.frombytes(np.full(pieces, -1, dtype=np.int64).tobytes())
        self.start.frombytes(starts.astype(np.float64).tobytes())
        self.end.frombytes(ends.astype(np.float64).tobytes())

    def adder(self, first_gpu: int, gpu_count: int) -> Callable[[float, float, int], None]:
        """A function adding one piece of these GPUs: (start, end, context order)."""
        gpu, count, start, end, context = (self.gpu.append, self.count.append, self.start.append, self.end.append,
                                           self.context.append)

        def add(a: float, b: float, order: int) -> None:
            gpu(first_gpu)
            count(gpu_count)
            start(a)
            end(b)
            context(order)
        return add

    def merged(self, contexts: list[Span], stages: Names, units: Names) -> dict[str, np.ndarray]:
        """Join pieces of neighbouring GPUs with identical content (times, label, stage, step, unit), so the log
        stays O(events), not O(GPUs); a run keeps its first GPU's version."""
        # Row 0: no context (unassigned); row 1 + order: that context's codes.
        coded = np.array([(LABEL_CODE["unassigned"], stages.code(""), -1, -1, units.code(""))]
                         + [(LABEL_CODE[c.label], stages.code(c.stage), c.step, c.version, units.code(c.unit))
                            for c in contexts], dtype=np.int64)
        label, stage, step, version, unit = coded[np.frombuffer(self.context, dtype=np.int64) + 1].T
        gpu, count = np.frombuffer(self.gpu, dtype=np.int64), np.frombuffer(self.count, dtype=np.int64)
        start, end = np.frombuffer(self.start, dtype=np.float64), np.frombuffer(self.end, dtype=np.float64)
        return _merged_runs({"first_gpu": gpu, "gpu_count": count, "start": start, "end": end, "label": label,
                             "stage": stage, "step": step, "version": version, "unit": unit})


def _merged_runs(pieces: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Span columns of the pieces (each over GPUs [first_gpu, first_gpu + gpu_count)) with runs of identical ones
    on consecutive GPUs joined: identical times, label, stage, step and unit; a run keeps its first piece's version."""
    gpu, count, start, end = (pieces[name] for name in ("first_gpu", "gpu_count", "start", "end"))
    label, stage, step, version, unit = (pieces[name] for name in ("label", "stage", "step", "version", "unit"))
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
            "start": start[first].astype(np.float64), "end": end[first].astype(np.float64),
            "label": label[first].astype(np.int8), "stage": stage[first].astype(np.int16),
            "step": step[first].astype(np.int32), "version": version[first].astype(np.int32),
            "unit": unit[first].astype(np.int32)}
