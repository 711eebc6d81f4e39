"""Metrics: pure functions over an EventLog (and, where the log alone cannot say, the run's RunFacts: pools, prices,
model FLOP coefficients). No SimPy and no plotting here; reports and metrics.json are built from these."""
from rlsim.metrics.engines import engine_rows, engine_series, engine_summary
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.labels import gpu_label_seconds, gpu_rows, gpu_seconds_by_label, pool_label_seconds, utilisation
from rlsim.metrics.sequences import staleness_histogram
from rlsim.metrics.steps import long_tail, measured_steps, step_rows
from rlsim.metrics.summary import run_metrics, summary

__all__ = [
    "RunFacts",
    "engine_rows",
    "engine_series",
    "engine_summary",
    "gpu_label_seconds",
    "gpu_rows",
    "gpu_seconds_by_label",
    "long_tail",
    "measured_steps",
    "pool_label_seconds",
    "run_metrics",
    "staleness_histogram",
    "step_rows",
    "summary",
    "utilisation",
]
