"""The environment pool of an agentic workload (`workload.environments`): the sandboxes (containers, microVMs, desktop
VMs) that run a trajectory's tool calls, with a concurrency limit, start-up (cold start) time, CPU cost and a price.

Without it a tool call takes its drawn latency and nothing else (an unlimited, always-warm pool). With it a tool call
first needs a sandbox: a warm idle one, else one started on demand (paying its cold start), else it queues, first come
first served, for the next one free. How long a sandbox stays with a trajectory is `scope`: `call` (stateless
execution servers such as a search or code-execution service: the sandbox goes back to the pool after the call) or
`trajectory` (code RL and SWE-style agents: one container per trajectory, claimed at its first tool call and held to
its end, then discarded, since its state is the trajectory's).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlsim.config.latency import LatencyModel
from rlsim.fields import Frozen, NonNegativeFloat, NonNegativeInt, PositiveInt


class Autoscaling(Frozen):
    """Sandboxes started on demand between a floor and a ceiling, as Kubernetes' and the sandbox services'
    autoscalers do: `min_sandboxes` run from the start and never stop; a call that finds none idle starts another
    (after `scale_up_delay_s`, then its cold start) while fewer than `max_sandboxes` run or start; one idle for
    `keep_alive_s` stops, down to the floor."""

    min_sandboxes: NonNegativeInt = Field(0, description="sandboxes kept running the whole run (the warm floor)")
    max_sandboxes: PositiveInt = Field(description="most sandboxes running or starting at once")
    scale_up_delay_s: NonNegativeFloat = Field(
        0.0, description="seconds from a call finding no idle sandbox to its new sandbox starting (the autoscaler's "
        "reaction; Kubernetes' Horizontal Pod Autoscaler syncs every 15 s by default)")
    keep_alive_s: NonNegativeFloat = Field(
        60.0, description="an on-demand sandbox idle this long stops (Modal's default container idle timeout is 60 s)")

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_sandboxes > self.max_sandboxes:
            raise ValueError(f"min_sandboxes ({self.min_sandboxes}) exceeds max_sandboxes ({self.max_sandboxes})")
        return self


class EnvironmentPool(Frozen):
    """The sandboxes that run tool calls: a fixed pool (`sandboxes`, all running from the start) or an autoscaled one
    (`autoscaling`), each tool-calling turn taking one sandbox (a turn's concurrent calls run in it together)."""

    sandboxes: PositiveInt | None = Field(
        None, description="a fixed pool: this many sandboxes run the whole run (the concurrency limit); give this or "
        "autoscaling")
    autoscaling: Autoscaling | None = Field(None, description="sandboxes started on demand between a floor and a ceiling")
    scope: Literal["call", "trajectory"] = Field(
        "call", description="call: a sandbox serves one tool-calling turn, then the next (stateless tool servers); "
        "trajectory: a trajectory claims one at its first tool call and holds it to its end, after which it is "
        "discarded and a fresh one starts (one container per trajectory, as in code and SWE-style RL)")
    cold_start: LatencyModel | None = Field(
        None, description="seconds a sandbox takes to start (required when sandboxes start during the run: autoscaling, "
        "or scope trajectory). Firecracker microVMs restored from a snapshot start in ~0.1-0.4 s (E2B), Docker "
        "containers in ~1-2 s, SWE-bench task images in tens of seconds, desktop VMs (OSWorld) in about a minute")
    cpu_seconds_per_call: NonNegativeFloat = Field(
        0.0, description="CPU-seconds a tool-calling turn's execution needs on the environment hosts, before its "
        "latency (tool_latency: the time spent waiting on I/O, services, the network)")
    cpu_cores: PositiveInt | None = Field(
        None, description="CPU cores the environment hosts have for that work: a call waits, first come first served, "
        "for a free core when all are busy (default: a core for every sandbox, never the limit)")
    usd_per_sandbox_hour: NonNegativeFloat = Field(
        0.0, description="price of one sandbox running for an hour (added to the run's cost); E2B's default 2-vCPU "
        "sandbox is ~$0.10/h, a 2-vCPU cloud VM ~$0.08/h")

    @model_validator(mode="after")
    def _one_size(self) -> EnvironmentPool:
        if (self.sandboxes is None) == (self.autoscaling is None):
            raise ValueError("give sandboxes (a fixed pool) or autoscaling (sandboxes started on demand), one of them")
        if self.cold_start is None and (self.autoscaling is not None or self.scope == "trajectory"):
            why = "autoscaling starts sandboxes on demand" if self.autoscaling is not None else \
                "scope trajectory starts a fresh sandbox after each trajectory"
            raise ValueError(f"cold_start required: {why} (e.g. {{kind: lognormal, median_s: 1.5, sigma: 0.5}} for "
                             "Docker containers)")
        return self

    @property
    def max_sandboxes(self) -> int:
        """The concurrency limit: sandboxes running or starting at once."""
        return self.sandboxes if self.sandboxes is not None else self.autoscaling.max_sandboxes  # type: ignore[union-attr]

    @property
    def warm_sandboxes(self) -> int:
        """Sandboxes running from the start, never stopped for idleness."""
        return self.sandboxes if self.sandboxes is not None else self.autoscaling.min_sandboxes  # type: ignore[union-attr]
