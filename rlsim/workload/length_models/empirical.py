"""empirical: lengths drawn from a list of observed values."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlsim.config.workload import LengthParams, LengthScale, check_weights
from rlsim.fields import PositiveFloat, PositiveInt
from rlsim.workload.lengths import FiniteLengths, LengthDistribution, register_length_model, scaled


class EmpiricalLength(LengthParams):
    """Lengths drawn from a list of observed values, optionally weighted (a histogram)."""

    kind: Literal["empirical"] = Field(description="empirical: lengths drawn from a list of observed values")
    tokens: list[PositiveInt] = Field(min_length=1, description="the observed lengths, in tokens")
    weights: list[PositiveFloat] | None = Field(None, description="relative weight of each length (default: equal)")
    scale: LengthScale = 1.0

    @model_validator(mode="after")
    def _weights_match(self) -> EmpiricalLength:
        check_weights(self.weights, len(self.tokens), "tokens")
        return self


@register_length_model(EmpiricalLength)
def empirical(model: EmpiricalLength, field: str) -> LengthDistribution:
    return FiniteLengths.of("empirical", scaled(model.tokens, model.scale), model.weights)
