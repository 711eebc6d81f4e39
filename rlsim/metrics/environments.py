"""The environment pool's figures (workload.environments) over the measured steps: how busy its sandboxes were, how
long tool calls waited for one, how many started cold, how many ran at most, and what they cost."""
from __future__ import annotations

import numpy as np

from rlsim.events import EventLog
from rlsim.events.environments import EnvironmentRecord
from rlsim.metrics.steps import measured_steps


def measured_span(log: EventLog, warmup_steps: int) -> tuple[float, float]:
    """[start, end) of the measured steps in simulated seconds (the whole run when none is measured)."""
    steps = measured_steps(log, warmup_steps) or list(log.steps)
    if not steps:
        return 0.0, log.wall_s
    return min(s.start for s in steps), max(s.end for s in steps)


def overlap_seconds(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Seconds of the intervals [starts, ends) inside [lo, hi), summed."""
    return float(np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0.0, None).sum())


def peak_sandboxes(record: EnvironmentRecord) -> int:
    """Most sandboxes running or starting at once over the run (a stop frees its place before a start at the same
    instant takes it)."""
    if not record.sandbox_started.size:
        return 0
    times = np.concatenate([record.sandbox_started, record.sandbox_stopped])
    changes = np.concatenate([np.ones(record.sandbox_started.size), -np.ones(record.sandbox_stopped.size)])
    order = np.lexsort((changes, times))
    return int(np.cumsum(changes[order]).max())


def environment_summary(log: EventLog, warmup_steps: int, step_time_s: float) -> dict | None:
    """metrics.json's `environments` (None without a pool). Utilisation is busy sandbox-seconds (running a tool
    call, its CPU wait included) over provisioned ones (running or starting); `held_fraction` counts the time a
    trajectory held its sandbox (scope trajectory: from its first call to its end). Waits are per use of a sandbox
    made in the measured steps (a call, or at scope trajectory a turn's calls): from its calls being made to its
    having a sandbox (a cold start included). Cost prices the provisioned sandbox-seconds at the mean step time."""
    record = log.environments
    if record is None:
        return None
    lo, hi = measured_span(log, warmup_steps)
    window = hi - lo
    provisioned = overlap_seconds(record.sandbox_started, record.sandbox_stopped, lo, hi)
    busy = overlap_seconds(record.call_acquired, record.call_done, lo, hi)
    held = overlap_seconds(record.hold_start, record.hold_end, lo, hi)
    made = (record.call_arrived >= lo) & (record.call_arrived < hi)
    waits = (record.call_acquired - record.call_arrived)[made]
    started = record.on_demand & (record.sandbox_started >= lo) & (record.sandbox_started < hi)
    cold = (record.sandbox_ready - record.sandbox_started)[started]
    steps = window / step_time_s if step_time_s > 0 else 0.0  # steps' worth of time in the window
    sandbox_hours_per_step = provisioned / 3600.0 / steps if steps else 0.0
    return {
        "scope": record.scope,
        "max_sandboxes": record.max_sandboxes,
        "warm_sandboxes": record.warm_sandboxes,
        "utilisation": busy / provisioned if provisioned else 0.0,
        "held_fraction": held / provisioned if provisioned else 0.0,
        "mean_sandboxes": provisioned / window if window else 0.0,
        "peak_sandboxes": peak_sandboxes(record),
        "calls": int(made.sum()),
        "queue_wait_s": {"mean": float(waits.mean()) if waits.size else 0.0,
                         "p99": float(np.quantile(waits, 0.99)) if waits.size else 0.0,
                         "waited_fraction": float((waits > 0).mean()) if waits.size else 0.0},
        "cold_starts": int(started.sum()),
        "cold_start_s_mean": float(cold.mean()) if cold.size else 0.0,
        "sandbox_hours_per_step": sandbox_hours_per_step,
        "usd_per_step": sandbox_hours_per_step * record.usd_per_sandbox_hour,
        "usd_per_1000_steps": 1000.0 * sandbox_hours_per_step * record.usd_per_sandbox_hour,
    }
