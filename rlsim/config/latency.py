"""Latency distributions (tool calls, sandbox start-up): each a pydantic model tagged by `kind`, in seconds."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlsim.fields import Frozen, LogSpread, NonNegativeFloat, PositiveFloat


def check_weights(weights: list[float] | None, count: int, what: str) -> None:
    if weights is not None and len(weights) != count:
        raise ValueError(f"weights has {len(weights)} entries but {what} has {count}")


class FixedLatency(Frozen):
    kind: Literal["fixed"] = Field(description="fixed: every call takes the same time")
    seconds: NonNegativeFloat = Field(description="the latency, in seconds")


class LognormalLatency(Frozen):
    kind: Literal["lognormal"] = Field(description="lognormal: log-normally distributed latencies")
    median_s: PositiveFloat = Field(description="median latency, in seconds")
    sigma: LogSpread = Field(description="standard deviation of ln(latency)")


class LatencyComponent(Frozen):
    weight: PositiveFloat = Field(description="relative weight; weights are normalised to sum to 1")
    median_s: PositiveFloat = Field(description="median latency of this component, in seconds")
    sigma: LogSpread = Field(description="standard deviation of ln(latency) in this component")


class LognormalMixtureLatency(Frozen):
    kind: Literal["lognormal_mixture"] = Field(description="lognormal_mixture: a weighted mix of lognormal latencies")
    components: list[LatencyComponent] = Field(min_length=1, description="the mixture's components")


class EmpiricalLatency(Frozen):
    kind: Literal["empirical"] = Field(description="empirical: latencies drawn from a list of observed values")
    seconds: list[NonNegativeFloat] = Field(min_length=1, description="the observed latencies, in seconds")
    weights: list[PositiveFloat] | None = Field(None, description="relative weight of each latency (default: equal)")

    @model_validator(mode="after")
    def _weights_match(self) -> EmpiricalLatency:
        check_weights(self.weights, len(self.seconds), "seconds")
        return self


LatencyModel = Annotated[FixedLatency | LognormalLatency | LognormalMixtureLatency | EmpiricalLatency,
                         Field(discriminator="kind")]
