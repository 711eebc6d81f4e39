"""GPU groups: the coarsest split of the cluster's GPUs into runs that did exactly the same thing all run long — a
rollout engine's TP group, a training rank's block, or a GPU serving both when colocated. Timelines and traces draw
one row per group instead of one per GPU."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import overload

import numpy as np

from rlsim.events import EventLog, Span
from rlsim.events.tables import CoveringSpans, SpanTable, group_edges
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.labels import group_units


@dataclass(frozen=True)
class GpuGroup:
    first_gpu: int
    gpu_count: int
    pool: str
    units: tuple[str, ...]  # engines and training ranks that ran on these GPUs, in order of first use

    @property
    def name(self) -> str:
        last = self.first_gpu + self.gpu_count - 1
        gpus = f"GPU {self.first_gpu}" if last == self.first_gpu else f"GPUs {self.first_gpu}-{last}"
        return f"{gpus} · {' '.join(self.units) or 'no role'}"


def gpu_groups(log: EventLog, facts: RunFacts) -> list[GpuGroup]:
    """Cut the GPU range at every span's and pool's edge: between two cuts every span covers all GPUs or none, so
    the GPUs of a group have identical timelines."""
    edges = group_edges(log.spans, log.gpus, [pool.first_gpu for pool in facts.pools])
    units = group_units(log.spans, edges)
    return [GpuGroup(a, b - a, facts.pool_of_gpu(a).name, u)
            for (a, b), u in zip(pairwise(edges.tolist()), units, strict=True)]


class GroupSpans(Sequence[list[Span]]):
    """Per group, its spans in time order (each covers the whole group), made as records when a group is asked for:
    a long run's spans as records for every group at once would be many times the log's own size."""

    def __init__(self, spans: SpanTable, edges: np.ndarray):
        self._covering = CoveringSpans(spans, edges)

    def __len__(self) -> int:
        return len(self._covering)

    @overload
    def __getitem__(self, i: int) -> list[Span]: ...

    @overload
    def __getitem__(self, i: slice) -> list[list[Span]]: ...

    def __getitem__(self, i: int | slice) -> list[Span] | list[list[Span]]:
        if isinstance(i, slice):
            return [self[k] for k in range(len(self))[i]]
        return self._covering.spans.records(self._covering.of(range(len(self))[i]))


def group_spans(log: EventLog, groups: list[GpuGroup]) -> GroupSpans:
    """Per group, its spans in time order (each covers the whole group), a group at a time."""
    edges = np.array([g.first_gpu for g in groups] + [groups[-1].first_gpu + groups[-1].gpu_count if groups else 0])
    return GroupSpans(log.spans, edges)
