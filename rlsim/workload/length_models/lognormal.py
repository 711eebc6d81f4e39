"""lognormal: lengths whose logarithm is normal."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlsim.config.workload import LengthParams, LengthScale
from rlsim.fields import LogSpread, PositiveFloat
from rlsim.workload.lengths import LengthDistribution, ScipyLengths, register_length_model


class LognormalLength(LengthParams):
    """Lengths whose logarithm is normal: the usual shape of reasoning-response lengths (long right tail).

    `loc_tokens` shifts the distribution (scipy's `loc`): a fitted scipy triple (s, loc, scale) is
    `sigma: s, loc_tokens: loc, median_tokens: loc + scale`.
    """

    kind: Literal["lognormal"] = Field(description="lognormal: log-normally distributed lengths")
    median_tokens: PositiveFloat = Field(description="median length in tokens (loc_tokens + e^mu)")
    sigma: LogSpread = Field(description="standard deviation of ln(length - loc_tokens)")
    loc_tokens: float = Field(0.0, allow_inf_nan=False,
                              description="where the distribution starts (scipy's loc); may be negative")
    scale: LengthScale = 1.0

    @model_validator(mode="after")
    def _median_above_loc(self) -> LognormalLength:
        if self.median_tokens <= self.loc_tokens:
            raise ValueError(f"median_tokens ({self.median_tokens}) must exceed loc_tokens ({self.loc_tokens})")
        return self


@register_length_model(LognormalLength)
def lognormal(model: LognormalLength, field: str) -> LengthDistribution:
    from scipy import stats  # scipy.stats takes a second to import; only continuous models need it

    k = model.scale
    return ScipyLengths("lognormal", stats.lognorm(s=model.sigma, loc=k * model.loc_tokens,
                                                  scale=k * (model.median_tokens - model.loc_tokens)))
