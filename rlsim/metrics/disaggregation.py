"""Prefill/decode disaggregation in a run's metrics: how busy the prefill engines' GPUs were, and the KV caches that
crossed from them to the decode engines (`EventLog.kv_transfers`). Absent from runs without prefill engines."""
from __future__ import annotations

import numpy as np

from rlsim.events import LABELS, EventLog
from rlsim.metrics.labels import gpu_label_seconds, gpu_units, utilisation

PREFILL_ENGINE = "prefill"  # the unit prefix of prefill engines (rlsim.sim.prefill)


def prefill_decode(log: EventLog) -> dict | None:
    """The prefill engines' GPUs (seconds by label, utilisation) and the KV-cache transfers (count, tokens, bytes,
    seconds per transfer and in all, and their share of the decode side's wait for its first token); None without
    prefill engines."""
    prefill_gpus = [gpu for gpu, units in enumerate(gpu_units(log))
                    if any(unit.startswith(PREFILL_ENGINE) for unit in units)]
    if not prefill_gpus:
        return None
    per_gpu = gpu_label_seconds(log)
    seconds = dict.fromkeys(LABELS, 0.0)
    for gpu in prefill_gpus:
        for label, value in per_gpu[gpu].items():
            seconds[label] += value
    transfers = log.kv_transfers
    durations = np.array([t.end - t.start for t in transfers], dtype=np.float64)
    tokens = np.array([t.tokens for t in transfers], dtype=np.float64)
    steps = max(1, len(log.steps))
    return {
        "prefill_gpus": len(prefill_gpus),
        "prefill_engines": len({unit for units in gpu_units(log) for unit in units if unit.startswith(PREFILL_ENGINE)}),
        "prefill_gpu_seconds_by_label": seconds,
        "prefill_utilisation": utilisation(seconds),
        "kv_transfer": {
            "count": len(transfers),
            "tokens": int(tokens.sum()),
            "bytes": float(sum(t.bytes for t in transfers)),
            "seconds_total": float(durations.sum()),
            "seconds_per_step": float(durations.sum() / steps),
            "seconds_mean": float(durations.mean()) if durations.size else 0.0,
            "seconds_max": float(durations.max()) if durations.size else 0.0,
        },
    }
