"""Where the GPU-seconds go: time by label of the idle taxonomy, per GPU, per pool and in total, and utilisation."""
from __future__ import annotations

from collections import defaultdict

from rlsim.events import BUSY_LABELS, COMMUNICATION_LABELS, IDLE_LABELS, LABELS, MEMORY_LABELS, EventLog
from rlsim.metrics.facts import RunFacts

CATEGORIES = {"busy": BUSY_LABELS, "communication": COMMUNICATION_LABELS, "memory": MEMORY_LABELS, "idle": IDLE_LABELS}
CATEGORY_OF = {label: category for category, labels in CATEGORIES.items() for label in labels}


def gpu_seconds_by_label(log: EventLog) -> dict[str, float]:
    """Seconds summed over GPUs, per label of the idle taxonomy (every label present, zero when unused)."""
    totals = dict.fromkeys(LABELS, 0.0)
    for span in log.spans:
        totals[span.label] += span.seconds * span.gpu_count
    return totals


def gpu_label_seconds(log: EventLog) -> list[dict[str, float]]:
    """Per GPU: seconds by label. For every GPU these sum to the simulated wall time."""
    per_gpu = [defaultdict(float) for _ in range(log.gpus)]
    for span in log.spans:
        for gpu in range(span.first_gpu, span.first_gpu + span.gpu_count):
            per_gpu[gpu][span.label] += span.seconds
    return [dict(d) for d in per_gpu]


def pool_label_seconds(log: EventLog, facts: RunFacts) -> dict[str, dict[str, float]]:
    """Per pool: seconds by label summed over its GPUs (every label present). The pools' tables add up to
    `gpu_seconds_by_label`."""
    totals = {pool.name: dict.fromkeys(LABELS, 0.0) for pool in facts.pools}
    for span in log.spans:
        for pool in facts.pools:
            inside = pool.overlap(span.first_gpu, span.gpu_count)
            if inside:
                totals[pool.name][span.label] += span.seconds * inside
    return totals


def utilisation(label_seconds: dict[str, float]) -> dict[str, float]:
    """Fractions of the GPU-seconds in each category of the taxonomy (busy, communication, memory, idle)."""
    total = sum(label_seconds.values())
    return {category: (sum(label_seconds[label] for label in labels) / total if total else 0.0)
            for category, labels in CATEGORIES.items()}


def gpu_units(log: EventLog) -> list[tuple[str, ...]]:
    """Per GPU: the engines and training ranks it served (the `unit` of its busy spans), in order of first use."""
    units: list[dict[str, None]] = [{} for _ in range(log.gpus)]
    for span in log.spans:
        if span.unit and span.label in BUSY_LABELS:
            for gpu in range(span.first_gpu, span.first_gpu + span.gpu_count):
                units[gpu].setdefault(span.unit, None)
    return [tuple(u) for u in units]


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
