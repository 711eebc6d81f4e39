"""Workload part of the scenario: how long prompts and responses are, and how rewards are computed.

The RL-workloads issue grows these unions (mixtures, trace replay formats, drift, multi-turn); each variant is a
pydantic model tagged by `kind`, so YAML selects it by name and a bad parameter is reported with its field path.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlsim.fields import Frozen, NonNegativeFloat, PositiveFloat, PositiveInt, Probability


class FixedLength(Frozen):
    """Every sample has the same length."""

    kind: Literal["fixed"]
    tokens: PositiveInt


class LognormalLength(Frozen):
    """Lengths whose logarithm is normal: the usual shape of reasoning-response lengths (long right tail)."""

    kind: Literal["lognormal"]
    median_tokens: PositiveFloat
    sigma: PositiveFloat = Field(description="standard deviation of ln(length)")


class GammaLength(Frozen):
    """Gamma-distributed lengths, parameterised by mean and shape (shape < 1: heavier tail)."""

    kind: Literal["gamma"]
    mean_tokens: PositiveFloat
    shape: PositiveFloat


class EmpiricalLength(Frozen):
    """Lengths drawn from a list of observed values, optionally weighted (a histogram)."""

    kind: Literal["empirical"]
    tokens: list[PositiveInt] = Field(min_length=1)
    weights: list[PositiveFloat] | None = None
    scale: PositiveFloat = Field(1.0, description="multiply every length (what if responses were k times longer?)")

    @model_validator(mode="after")
    def _weights_match(self) -> EmpiricalLength:
        if self.weights is not None and len(self.weights) != len(self.tokens):
            raise ValueError(f"weights has {len(self.weights)} entries but tokens has {len(self.tokens)}")
        return self


class TraceLength(Frozen):
    """Replay of a recorded trace file (PolyTrace packed-length format); the path is relative to the scenario file."""

    kind: Literal["trace"]
    path: str = Field(min_length=1)
    scale: PositiveFloat = Field(1.0, description="multiply every length (what if responses were k times longer?)")


LengthModel = Annotated[
    FixedLength | LognormalLength | GammaLength | EmpiricalLength | TraceLength, Field(discriminator="kind")
]


class RuleReward(Frozen):
    """Rule-based reward (math answer check) on a pool of CPU workers."""

    kind: Literal["rule"]
    cpu_seconds_per_sample: NonNegativeFloat = 0.005
    workers: PositiveInt = 32


class SandboxReward(Frozen):
    """Code execution in a sandbox: lognormal latency per sample and a cap on concurrent executions."""

    kind: Literal["sandbox"]
    median_latency_s: PositiveFloat
    latency_sigma: NonNegativeFloat = 0.5
    concurrency: PositiveInt = 64


class ModelReward(Frozen):
    """A reward model scoring each response with a forward pass on GPUs (placement.reward_model says where)."""

    kind: Literal["reward_model"]
    model: str = Field(min_length=1, description="catalog model name")


RewardConfig = Annotated[RuleReward | SandboxReward | ModelReward, Field(discriminator="kind")]


class Workload(Frozen):
    prompt_tokens: LengthModel
    response_tokens: LengthModel
    reward: RewardConfig = Field(default_factory=lambda: RuleReward(kind="rule"))
    informative_group_fraction: Probability = Field(
        1.0, description="chance that a group's rewards differ (not all right or all wrong): the groups DAPO's "
        "dynamic sampling keeps")
