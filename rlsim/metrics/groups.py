"""GPU groups: the coarsest split of the cluster's GPUs into runs that did exactly the same thing all run long — a
rollout engine's TP group, a training rank's block, or a GPU serving both when colocated. Timelines and traces draw
one row per group instead of one per GPU."""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import pairwise

from rlsim.events import BUSY_LABELS, EventLog, Span
from rlsim.metrics.facts import RunFacts


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
    cuts = {0, log.gpus}
    cuts.update(pool.first_gpu for pool in facts.pools)
    for span in log.spans:
        cuts.add(span.first_gpu)
        cuts.add(span.first_gpu + span.gpu_count)
    edges = sorted(cuts)
    units: list[dict[str, None]] = [{} for _ in edges[:-1]]
    for span in log.spans:
        if span.unit and span.label in BUSY_LABELS:
            for g in range(bisect_left(edges, span.first_gpu), bisect_left(edges, span.first_gpu + span.gpu_count)):
                units[g].setdefault(span.unit, None)
    return [GpuGroup(a, b - a, facts.pool_of_gpu(a).name, tuple(u))
            for (a, b), u in zip(pairwise(edges), units, strict=True)]


def group_spans(log: EventLog, groups: list[GpuGroup]) -> list[list[Span]]:
    """Per group, its spans in time order (each covers the whole group)."""
    starts = [g.first_gpu for g in groups]
    per_group: list[list[Span]] = [[] for _ in groups]
    for span in log.spans:
        for g in range(bisect_left(starts, span.first_gpu), bisect_left(starts, span.first_gpu + span.gpu_count)):
            per_group[g].append(span)
    for spans in per_group:
        spans.sort(key=lambda s: (s.start, s.end))
    return per_group
