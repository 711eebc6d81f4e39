"""The headline figures of a run, in the order a reader asks for them, with how to format each and which direction
is better. The terminal summary, the HTML summary table and `rlsim compare` all read this one list."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Unit = Literal["s", "fraction", "count", "per_s", "per_gpu_hour", "usd", "gpu_hours", "versions"]
Better = Literal["lower", "higher", "neither"]


@dataclass(frozen=True)
class Headline:
    path: tuple[str, ...]  # where the value lives in metrics.json
    title: str
    unit: Unit
    better: Better
    optional: bool = False  # only some runs have it (goodput, prefill engines, a pool): shown where present

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
    Headline(("sample_use", "useful_gradient", "group_share"), "groups with a useful gradient", "fraction", "higher"),
    Headline(("sample_use", "never_trained", "token_share"), "generated tokens never trained", "fraction", "lower"),
    Headline(("sample_use", "staleness_length_bias", "long_minus_short_drop_rate"),
             "staleness drops, long − short", "fraction", "lower"),
    Headline(("prefill_decode", "prefill_utilisation", "busy"), "prefill GPUs busy", "fraction", "higher",
             optional=True),
    Headline(("prefill_decode", "kv_transfer", "seconds_per_step"), "KV-cache transfer seconds per step", "s", "neither",
             optional=True),
    # The environment pool's figures (workload.environments).
    Headline(("environments", "utilisation"), "environment utilisation (sandboxes running calls)", "fraction", "higher",
             optional=True),
    Headline(("environments", "held_fraction"), "sandbox time held by trajectories", "fraction", "neither",
             optional=True),
    Headline(("environments", "queue_wait_s", "mean"), "tool-call wait for a sandbox, mean", "s", "lower", optional=True),
    Headline(("environments", "queue_wait_s", "p99"), "tool-call wait for a sandbox, p99", "s", "lower", optional=True),
    Headline(("environments", "cold_starts"), "sandbox cold starts (measured steps)", "count", "lower", optional=True),
    Headline(("environments", "peak_sandboxes"), "peak sandboxes", "count", "neither", optional=True),
    Headline(("environments", "usd_per_1000_steps"), "sandbox $ per 1,000 steps", "usd", "lower", optional=True),
)


# Each agent's figures in a multi-agent run (metrics.json `agents`), shown for every agent some run has.
AGENT_HEADLINES: tuple[tuple[tuple[str, ...], str, Unit, Better], ...] = (
    (("tokens_per_s",), "trained tokens/s", "per_s", "higher"),
    (("tokens_per_s_per_gpu",), "trained tokens/s per GPU", "per_s", "higher"),
    (("busy_until_s",), "step done after (trained, weights loaded)", "s", "lower"),
    (("utilisation", "busy"), "GPU-time busy", "fraction", "higher"),
    (("label_shares", "starved"), "GPU-time starved (its calls with other agents)", "fraction", "lower"),
    (("label_shares", "tail"), "GPU-time in the tail (its calls done)", "fraction", "lower"),
    (("label_shares", "barrier"), "GPU-time waiting for other agents' updates", "fraction", "lower"),
)


def shown(*metrics: dict) -> tuple[Headline, ...]:
    """The headlines to show for these runs: every one, but an optional figure only where some run has it; then each
    agent's of a multi-agent run."""
    fixed = tuple(h for h in HEADLINES if not h.optional or any(lookup(m, h.path) is not None for m in metrics))
    agents = dict.fromkeys(name for m in metrics for name in (m.get("agents") or {}))
    return fixed + tuple(Headline(("agents", name, *path), f"agent {name}: {title}", unit, better, optional=True)
                         for name in agents for path, title, unit, better in AGENT_HEADLINES)


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
