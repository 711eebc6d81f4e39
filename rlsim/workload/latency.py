"""Latency distributions (tool calls): the YAML `kind`s of `LatencyModel`, in seconds, built on the same distribution
classes as lengths (their `ppf` maps uniform scores to seconds; nothing is rounded)."""
from __future__ import annotations

from collections.abc import Callable

from rlsim import registry
from rlsim.config.workload import (
    EmpiricalLatency,
    FixedLatency,
    LatencyModel,
    LognormalLatency,
    LognormalMixtureLatency,
)
from rlsim.registry import Registry
from rlsim.workload.lengths import FiniteLengths, LengthDistribution, MixtureLengths, ScipyLengths

Builder = Callable[[LatencyModel], LengthDistribution]
LATENCY_MODELS: Registry[Builder] = registry.LATENCY_MODELS
register_latency_model = LATENCY_MODELS.register


def latency_distribution(model: LatencyModel) -> LengthDistribution:
    return LATENCY_MODELS[model.kind](model)


@register_latency_model("fixed")
def _fixed(model: FixedLatency) -> LengthDistribution:
    return FiniteLengths.of("fixed", [model.seconds])


@register_latency_model("lognormal")
def _lognormal(model: LognormalLatency) -> LengthDistribution:
    from scipy import stats

    return ScipyLengths("lognormal", stats.lognorm(s=model.sigma, scale=model.median_s))


@register_latency_model("lognormal_mixture")
def _lognormal_mixture(model: LognormalMixtureLatency) -> LengthDistribution:
    from scipy import stats

    return MixtureLengths.of("lognormal_mixture", [c.weight for c in model.components],
                             [ScipyLengths("lognormal", stats.lognorm(s=c.sigma, scale=c.median_s))
                              for c in model.components])


@register_latency_model("empirical")
def _empirical(model: EmpiricalLatency) -> LengthDistribution:
    return FiniteLengths.of("empirical", model.seconds, model.weights)
