"""Where the GPU-seconds go: time by label of the idle taxonomy, per GPU, per pool and in total, and utilisation."""
from __future__ import annotations

import numpy as np

from rlsim.events import BUSY_LABELS, COMMUNICATION_LABELS, IDLE_LABELS, LABELS, MEMORY_LABELS, EventLog
from rlsim.events.tables import SpanTable, group_edges, span_groups
from rlsim.metrics.columns import first_occurrences, ordered_sums
from rlsim.metrics.facts import RunFacts

CATEGORIES = {"busy": BUSY_LABELS, "communication": COMMUNICATION_LABELS, "memory": MEMORY_LABELS, "idle": IDLE_LABELS}
CATEGORY_OF = {label: category for category, labels in CATEGORIES.items() for label in labels}


def gpu_seconds_by_label(log: EventLog) -> dict[str, float]:
    """Seconds summed over GPUs, per label of the idle taxonomy (every label present, zero when unused)."""
    spans = log.spans
    totals = ordered_sums(spans.label, spans.seconds * spans.gpu_count, len(LABELS))
    return dict(zip(LABELS, totals.tolist(), strict=True))


def gpu_label_seconds(log: EventLog) -> list[dict[str, float]]:
    """Per GPU: seconds by label, labels in order of first use. For every GPU these sum to the simulated wall time."""
    spans = log.spans
    edges = group_edges(spans, log.gpus)
    span, group = span_groups(spans, edges)
    keys = group * len(LABELS) + spans.label[span]
    totals = ordered_sums(keys, spans.seconds[span], (edges.size - 1) * len(LABELS))
    used = first_occurrences(group, spans.label[span].astype(np.int64))
    per_group = [{LABELS[label]: float(totals[g * len(LABELS) + label]) for label in used.get(g, [])}
                 for g in range(edges.size - 1)]
    return [dict(per_group[g]) for g in np.searchsorted(edges, np.arange(log.gpus), side="right") - 1]


def pool_label_seconds(log: EventLog, facts: RunFacts) -> dict[str, dict[str, float]]:
    """Per pool: seconds by label summed over its GPUs (every label present). The pools' tables add up to
    `gpu_seconds_by_label`."""
    return {pool.name: range_label_seconds(log.spans, pool.first_gpu, pool.gpus) for pool in facts.pools}


def range_label_seconds(spans: SpanTable, first_gpu: int, gpus: int) -> dict[str, float]:
    """Seconds by label summed over GPUs [first_gpu, first_gpu + gpus) (every label present)."""
    first = spans.first_gpu.astype(np.int64)
    inside = np.clip(np.minimum(first + spans.gpu_count, first_gpu + gpus) - np.maximum(first, first_gpu), 0, None)
    used = inside > 0
    sums = ordered_sums(spans.label[used], spans.seconds[used] * inside[used], len(LABELS))
    return dict(zip(LABELS, sums.tolist(), strict=True))


def utilisation(label_seconds: dict[str, float]) -> dict[str, float]:
    """Fractions of the GPU-seconds in each category of the taxonomy (busy, communication, memory, idle)."""
    total = sum(label_seconds.values())
    return {category: (sum(label_seconds[label] for label in labels) / total if total else 0.0)
            for category, labels in CATEGORIES.items()}


def gpu_units(log: EventLog) -> list[tuple[str, ...]]:
    """Per GPU: the engines and training ranks it served (the `unit` of its busy spans), in order of first use."""
    spans = log.spans
    edges = group_edges(spans, log.gpus)
    per_group = group_units(spans, edges)
    return [per_group[g] for g in np.searchsorted(edges, np.arange(log.gpus), side="right") - 1]


def group_units(spans: SpanTable, edges: np.ndarray) -> list[tuple[str, ...]]:
    """Per group of `edges`: the units of the busy spans that covered it, in order of first use."""
    served = spans.labelled(*BUSY_LABELS) & spans.unit_mask(bool)
    span, group = span_groups(spans, edges, served)
    used = first_occurrences(group, spans.unit[span].astype(np.int64))
    return [tuple(spans.unit_names[u] for u in used.get(g, [])) for g in range(edges.size - 1)]


def gpu_rows(log: EventLog, facts: RunFacts) -> list[dict]:
    """The per-GPU table: pool, GPU type, the units it served, seconds by label, and its busy fraction."""
    seconds = gpu_label_seconds(log)
    units = gpu_units(log)
    rows = []
    for gpu in range(log.gpus):
        pool = facts.pool_of_gpu(gpu)
        row: dict = {"gpu": gpu, "pool": pool.name, "gpu_type": pool.gpu, "units": " ".join(units[gpu])}
        row.update({label: seconds[gpu].get(label, 0.0) for label in LABELS})
        row["busy_fraction"] = (sum(seconds[gpu].get(label, 0.0) for label in BUSY_LABELS) / log.wall_s
                                if log.wall_s else 0.0)
        rows.append(row)
    return rows


def label_shares(metrics: dict) -> dict[str, float]:
    """Each label's share of all GPU-seconds of a run, from its metrics.json (`gpu_seconds_by_label`)."""
    seconds = metrics["gpu_seconds_by_label"]
    total = sum(seconds.values()) or 1.0
    return {label: seconds.get(label, 0.0) / total for label in LABELS}
