"""gamma: gamma-distributed lengths."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlsim.config.workload import LengthParams, LengthScale
from rlsim.fields import PositiveFloat
from rlsim.workload.lengths import LengthDistribution, ScipyLengths, register_length_model


class GammaLength(LengthParams):
    """Gamma-distributed lengths, parameterised by mean and shape (shape < 1: heavier tail)."""

    kind: Literal["gamma"] = Field(description="gamma: gamma-distributed lengths")
    mean_tokens: PositiveFloat = Field(description="mean length in tokens")
    shape: PositiveFloat = Field(description="the gamma shape k (larger: narrower around the mean)")
    scale: LengthScale = 1.0


@register_length_model(GammaLength)
def gamma(model: GammaLength, field: str) -> LengthDistribution:
    from scipy import stats

    return ScipyLengths("gamma", stats.gamma(a=model.shape, scale=model.scale * model.mean_tokens / model.shape))
