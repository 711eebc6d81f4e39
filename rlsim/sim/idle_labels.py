"""Idle time labelled by cause: each GPU's gaps between busy spans take the label of the latest-recorded context
covering them (`unassigned` where none does), so for every GPU the labels sum to the wall time by construction.

GPUs between two edges of spans or contexts have identical timelines, so each such group is labelled once, a pass of
GROUPS_PER_PASS groups at a time (the pieces held before merging are a slice of the run's, however many GPUs the
cluster has); neighbouring GPUs with identical pieces are merged into one span, so the log stays O(events), not
O(GPUs). The contexts covering a group are swept once into the label each instant takes, shared by every group they
cover, and each group's gaps are cut and labelled from it by numpy lookups: O(contexts log contexts) in Python, then
O(gaps + pieces) in numpy, however many groups the contexts cover.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator

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
            pieces.add(first_gpu, gpu_count, gap_starts, gap_ends, np.full(gap_starts.size, -1, dtype=np.int64))
        else:
            pieces.add(first_gpu, gpu_count, *sweep.pieces(gap_starts, gap_ends))
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
    """The contexts covering a group of GPUs (with their order of recording), swept once in time order into the label
    each instant takes: `times`, the distinct times at which a context starts or ends, ascending, and for each the
    order of the latest-recorded context active from it until the next (-1: none). Shared by every group the
    same contexts cover, whose gaps are then cut and labelled by array lookups (`pieces`): sweeping the contexts again
    for each group made the labelling grow with groups × contexts in Python."""

    def __init__(self, contexts: list[tuple[int, Span]]):
        events = sorted([(ctx.start, order, True) for order, ctx in contexts]
                        + [(ctx.end, order, False) for order, ctx in contexts])
        times: list[float] = []
        owners: list[int] = []
        active: set[int] = set()
        latest: list[int] = []  # max-heap of active orders (negated), stale entries dropped lazily
        index = 0
        while index < len(events):
            time = events[index][0]
            while index < len(events) and events[index][0] == time:  # every boundary at this time applies at once
                _, order, starts = events[index]
                if starts:
                    active.add(order)
                    heapq.heappush(latest, -order)
                else:
                    active.discard(order)
                index += 1
            while latest and -latest[0] not in active:
                heapq.heappop(latest)
            times.append(time)
            owners.append(-latest[0] if latest else -1)
        self.times = np.array(times, dtype=np.float64)
        # Read at a boundary's index + 1: a slot before the first (no owner yet) and, for times, one after the last.
        self._times_padded = np.concatenate([[np.nan], self.times, [np.nan]])
        self._owners_padded = np.array([-1, *owners], dtype=np.int64)

    def pieces(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaps [starts[i], ends[i]) (in time order, not overlapping) cut at every context boundary strictly inside
        them, in order: the pieces' starts, ends and owners (the order of the latest-recorded context covering each,
        -1 for none). A piece starting at t takes the owner from the last boundary at or before t."""
        times = self.times
        first = np.searchsorted(times, starts, side="right")  # boundaries at or before each gap's start
        cuts = np.searchsorted(times, ends, side="left") - first  # boundaries strictly inside each gap
        counts = cuts + 1
        gap = np.repeat(np.arange(starts.size), counts)  # each piece's gap
        within = np.arange(gap.size) - np.repeat(np.cumsum(counts) - counts, counts)  # its place in its gap
        # Piece k of a gap whose first inner boundary is times[f] starts at times[f + k - 1] (at the gap's start for
        # k = 0) and ends at times[f + k] (at the gap's end for its last piece); it takes owners[f + k - 1], none
        # before the first boundary.
        after = first[gap] + within  # the index + 1 of the boundary a piece starts from
        piece_starts = np.where(within == 0, starts[gap], self._times_padded[after])
        piece_ends = np.where(within == cuts[gap], ends[gap], self._times_padded[after + 1])
        return piece_starts, piece_ends, self._owners_padded[after]


class _Pieces:
    """Idle pieces of groups of GPUs as they are labelled, a group's as arrays, then merged into spans over runs of
    GPUs."""

    def __init__(self) -> None:
        self.gpu: list[np.ndarray] = []
        self.count: list[np.ndarray] = []
        self.start: list[np.ndarray] = []
        self.end: list[np.ndarray] = []
        self.context: list[np.ndarray] = []  # each piece's context order, -1 for none

    def add(self, first_gpu: int, gpu_count: int, starts: np.ndarray, ends: np.ndarray, contexts: np.ndarray) -> None:
        """Pieces of GPUs [first_gpu, first_gpu + gpu_count): their starts, ends and context orders."""
        self.gpu.append(np.full(starts.size, first_gpu, dtype=np.int64))
        self.count.append(np.full(starts.size, gpu_count, dtype=np.int64))
        self.start.append(starts.astype(np.float64, copy=False))
        self.end.append(ends.astype(np.float64, copy=False))
        self.context.append(contexts.astype(np.int64, copy=False))

    def merged(self, contexts: list[Span], stages: Names, units: Names) -> dict[str, np.ndarray]:
        """Join pieces of neighbouring GPUs with identical content (times, label, stage, step, unit), so the log
        stays O(events), not O(GPUs); a run keeps its first GPU's version."""
        # Row 0: no context (unassigned); row 1 + order: that context's codes.
        coded = np.array([(LABEL_CODE["unassigned"], stages.code(""), -1, -1, units.code(""))]
                         + [(LABEL_CODE[c.label], stages.code(c.stage), c.step, c.version, units.code(c.unit))
                            for c in contexts], dtype=np.int64)
        label, stage, step, version, unit = coded[_joined(self.context, np.int64) + 1].T
        return _merged_runs({"first_gpu": _joined(self.gpu, np.int64), "gpu_count": _joined(self.count, np.int64),
                             "start": _joined(self.start, np.float64), "end": _joined(self.end, np.float64),
                             "label": label, "stage": stage, "step": step, "version": version, "unit": unit})


def _joined(chunks: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)


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
