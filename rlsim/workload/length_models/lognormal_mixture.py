"""lognormal_mixture: a weighted mix of lognormal distributions of length."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlsim.config.workload import LengthParams, LengthScale
from rlsim.fields import Frozen, LogSpread, PositiveFloat
from rlsim.workload.lengths import LengthDistribution, MixtureLengths, ScipyLengths, register_length_model


class LognormalComponent(Frozen):
    weight: PositiveFloat = Field(description="relative weight; weights are normalised to sum to 1")
    median_tokens: PositiveFloat = Field(description="median length of this component, in tokens")
    sigma: LogSpread = Field(description="standard deviation of ln(length) in this component")


class LognormalMixtureLength(LengthParams):
    """A mixture of lognormals (a Gaussian mixture of ln(length)): what `rlsim workload fit` fits to traces."""

    kind: Literal["lognormal_mixture"] = Field(description="lognormal_mixture: a weighted mix of lognormal distributions")
    components: list[LognormalComponent] = Field(min_length=1, description="the mixture's components")
    scale: LengthScale = 1.0


@register_length_model(LognormalMixtureLength)
def lognormal_mixture(model: LognormalMixtureLength, field: str) -> LengthDistribution:
    from scipy import stats

    return MixtureLengths.of("lognormal_mixture", [c.weight for c in model.components],
                             [ScipyLengths("lognormal", stats.lognorm(s=c.sigma, scale=model.scale * c.median_tokens))
                              for c in model.components])
