"""The headline figures of a run, in the order a reader asks for them, with how to format each and which direction
is better. The terminal summary, the HTML summary table and `rlsim compare` all read this one list."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Unit = Literal["s", "fraction", "count", "per_s", "per_gpu_hour", "usd", "gpu_hours", "versions"]


@dataclass(frozen=True)
class Headline:
    path: tuple[str, ...]  # where the value lives in metrics.json
    title: str
    unit: Unit
    better: Literal["lower", "higher", "neither"]
    # Shown only for runs that have it: goodput exists when the scenario sets run.horizon.
    optional: bool = False

    @property
    def key(self) -> str:
        """A JSON pointer into metrics.json (pool names may contain dots, never slashes)."""
        return "/" + "/".join(self.path)


HEADLINES = (
    Headline(("step_time_s", "mean"), "mean step time", "s", "lower"),
    Headline(("step_time_s", "p50"), "median step time", "s", "lower"),
    Headline(("step_time_s", "max"), "slowest step", "s", "lower"),
    Headline(("throughput", "tokens_per_s"), "trained tokens/s", "per_s", "higher"),
    Headline(("throughput", "tokens_per_s_per_gpu"), "trained tokens/s per GPU", "per_s", "higher"),
    Headline(("throughput", "samples_per_s"), "trained samples/s", "per_s", "higher"),
    Headline(("goodput", "tokens_per_gpu_hour"), "goodput: trained tokens per GPU-hour over the horizon",
             "per_gpu_hour", "higher", optional=True),
    Headline(("goodput", "fraction"), "goodput: share of the horizon spent on kept steps", "fraction", "higher",
             optional=True),
    Headline(("goodput", "failures"), "failures over the horizon", "count", "lower", optional=True),
    Headline(("cost", "usd_per_1000_steps"), "$ per 1,000 steps", "usd", "lower"),
    Headline(("cost", "gpu_hours_per_1000_steps"), "GPU-hours per 1,000 steps", "gpu_hours", "lower"),
    Headline(("utilisation", "busy"), "GPU-time busy", "fraction", "higher"),
    Headline(("utilisation", "idle"), "GPU-time idle", "fraction", "lower"),
    Headline(("utilisation", "communication"), "GPU-time communicating", "fraction", "lower"),
    Headline(("utilisation", "memory"), "GPU-time offloading/reloading", "fraction", "lower"),
    Headline(("mfu", "overall"), "MFU, whole cluster", "fraction", "higher"),
    Headline(("mfu", "generation"), "MFU while generating", "fraction", "higher"),
    Headline(("mfu", "training"), "MFU in training stages", "fraction", "higher"),
    Headline(("hbm_bandwidth_utilisation", "decode"), "HBM bandwidth used while decoding", "fraction", "higher"),
    Headline(("engines", "kv_occupancy", "mean"), "KV cache in use while generating", "fraction", "neither"),
    Headline(("long_tail", "bubble_s_mean"), "long-tail bubble per step", "s", "lower"),
    Headline(("long_tail", "tail_gpu_s_per_step"), "tail GPU-seconds per step", "s", "lower"),
    Headline(("staleness", "mean"), "mean staleness", "versions", "neither"),
    Headline(("staleness", "max"), "max staleness", "versions", "neither"),
)


def shown(*runs: dict) -> tuple[Headline, ...]:
    """The headlines to show for these runs' metrics: every one but the optional ones no run has."""
    return tuple(h for h in HEADLINES if not h.optional or any(lookup(m, h.path) is not None for m in runs))


def lookup(metrics: dict, path: tuple[str, ...]):
    value = metrics
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def format_value(value: float | None, unit: Unit) -> str:
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "fraction":
        return f"{value:.1%}"
    if unit == "per_s":
        return f"{value:,.1f}/s"
    if unit == "per_gpu_hour":
        return f"{value:,.0f}/GPU-h"
    if unit == "usd":
        return f"${value:,.2f}"
    if unit == "gpu_hours":
        return f"{value:,.1f} GPU-h"
    if unit == "versions":
        return f"{value:.2f}" if isinstance(value, float) else str(value)
    return f"{value:,}"
