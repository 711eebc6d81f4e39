"""Metrics: pure functions over an EventLog. No SimPy here; the report and metrics.json are built from these."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from rlsim.events import LABELS, STAGES, EventLog


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


def measured_steps(log: EventLog, warmup_steps: int):
    return [s for s in log.steps if s.step >= warmup_steps]


def summary(log: EventLog, warmup_steps: int) -> dict:
    """The metrics.json contract: step time, verl stage means, throughput, GPU-seconds by label, staleness, simulator.

    Everything here is a function of the scenario and seed alone, so the same inputs give a byte-identical file; the
    host seconds a run took are reported beside it (timing.json), not in it.
    """
    steps = measured_steps(log, warmup_steps) or list(log.steps)
    times = np.array([s.seconds for s in steps]) if steps else np.zeros(1)
    window = (steps[-1].end - steps[0].start) if steps else 0.0
    tokens = sum(s.tokens for s in steps)
    samples = sum(s.samples for s in steps)
    trained = [r for r in log.sequences if r.step_trained >= 0]
    staleness = np.array([r.staleness for r in trained]) if trained else np.zeros(1)
    return {
        "step_time_s": {"mean": float(times.mean()), "p50": float(np.median(times)), "max": float(times.max())},
        "stages_s": {name: float(np.mean([s.stages.get(name, 0.0) for s in steps])) if steps else 0.0
                     for name in STAGES},
        "throughput": {
            "tokens_per_s": tokens / window if window else 0.0,
            "tokens_per_s_per_gpu": tokens / window / log.gpus if window else 0.0,
            "samples_per_s": samples / window if window else 0.0,
        },
        "gpu_seconds_by_label": gpu_seconds_by_label(log),
        "staleness": {"mean": float(staleness.mean()), "max": int(staleness.max())},
        "sequences": {"trained": len(trained), "dropped": len(log.sequences) - len(trained),
                      "truncated_fraction": float(np.mean([r.truncated for r in trained])) if trained else 0.0},
        "simulator": {"events": log.events, "wall_s": log.wall_s},
    }
