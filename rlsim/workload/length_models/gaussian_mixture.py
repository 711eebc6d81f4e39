"""gaussian_mixture: a weighted mix of normal distributions of length."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlsim.config.workload import LengthParams, LengthScale
from rlsim.fields import Frozen, PositiveFloat
from rlsim.workload.lengths import LengthDistribution, MixtureLengths, ScipyLengths, register_length_model


class GaussianComponent(Frozen):
    weight: PositiveFloat = Field(description="relative weight; weights are normalised to sum to 1")
    mean_tokens: float = Field(allow_inf_nan=False, description="mean length of this component, in tokens")
    std_tokens: PositiveFloat = Field(description="standard deviation of this component, in tokens")


class GaussianMixtureLength(LengthParams):
    """A mixture of normal distributions of length (lengths below 1 token count as 1)."""

    kind: Literal["gaussian_mixture"] = Field(
        description="gaussian_mixture: a weighted mix of normal distributions (cut at 1 token)")
    components: list[GaussianComponent] = Field(min_length=1, description="the mixture's components")
    scale: LengthScale = 1.0


@register_length_model(GaussianMixtureLength)
def gaussian_mixture(model: GaussianMixtureLength, field: str) -> LengthDistribution:
    from scipy import stats

    return MixtureLengths.of("gaussian_mixture", [c.weight for c in model.components],
                             [ScipyLengths("normal", stats.norm(loc=model.scale * c.mean_tokens,
                                                                scale=model.scale * c.std_tokens))
                              for c in model.components])
