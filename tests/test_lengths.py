"""Length distributions: clipped means and fractions agree with sampling and with closed forms."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter
from scipy import integrate, stats

from rlsim.config.workload import FixedLength, StaticLengthModel, TraceLength
from rlsim.workload import length_distribution
from rlsim.workload.length_models.empirical import EmpiricalLength
from rlsim.workload.length_models.gamma import GammaLength
from rlsim.workload.length_models.lognormal import LognormalLength
from rlsim.workload.lengths import ScipyLengths


def lognormal_clipped_mean(median: float, sigma: float, cap: float) -> float:
    """Closed form of E[min(X, c)] for a lognormal."""
    mu = math.log(median)
    phi = stats.norm.cdf
    return math.exp(mu + sigma**2 / 2) * phi((math.log(cap) - mu - sigma**2) / sigma) + cap * (
        1 - phi((math.log(cap) - mu) / sigma))


def test_lognormal_clipped_mean_matches_closed_form():
    dist = length_distribution(LognormalLength(kind="lognormal", median_tokens=2000, sigma=0.9))
    assert dist.clipped_mean(8192) == pytest.approx(lognormal_clipped_mean(2000, 0.9, 8192), rel=1e-6)
    assert dist.clipped_fraction(8192) == pytest.approx(stats.norm.sf(math.log(8192 / 2000) / 0.9), rel=1e-9)


@pytest.mark.parametrize("dist", [
    stats.lognorm(s=0.9, scale=2000), stats.lognorm(s=0.5, loc=100, scale=900), stats.gamma(a=0.5, scale=1000),
    stats.gamma(a=2.5, scale=400), stats.norm(loc=3000, scale=900), stats.norm(loc=-5, scale=3),
    stats.weibull_min(c=1.5, scale=2000),  # a family without a closed form here
])
@pytest.mark.parametrize("cap", [50, 8192, 1e6])
def test_clipped_means_agree_with_numerical_integration(dist, cap):
    """The clipped mean, in closed form for the families the length models build, agrees with another route to it:
    E[min(max(X, 1), c)] = 1 + ∫₁^c P(X > t) dt, integrated numerically where P(X > t) is not negligible."""
    integrated = 1 + integrate.quad(dist.sf, 1, min(cap, max(1.0, dist.isf(1e-16))), limit=500)[0]
    assert ScipyLengths("any", dist).clipped_mean(cap) == pytest.approx(integrated, rel=1e-9)


@pytest.mark.parametrize("model", [
    LognormalLength(kind="lognormal", median_tokens=1500, sigma=1.1),
    GammaLength(kind="gamma", mean_tokens=3000, shape=0.8),
    EmpiricalLength(kind="empirical", tokens=[100, 5000, 20000], weights=[1, 2, 1]),
    FixedLength(kind="fixed", tokens=9000),
])
def test_sampling_agrees_with_clipped_statistics(model):
    dist = length_distribution(model)
    cap = 8192
    samples = dist.sample(np.random.default_rng(0), 200_000, cap)
    assert samples.max() <= cap and samples.min() >= 1
    assert samples.mean() == pytest.approx(dist.clipped_mean(cap), rel=0.01)
    assert (samples >= cap).mean() == pytest.approx(dist.clipped_fraction(cap), abs=0.005)


def test_same_seed_same_lengths():
    dist = length_distribution(GammaLength(kind="gamma", mean_tokens=3000, shape=0.8))
    a = dist.sample(np.random.default_rng(5), 1000, 16000)
    b = dist.sample(np.random.default_rng(5), 1000, 16000)
    assert (a == b).all()


def test_trace_reads_packed_lengths(tmp_path: Path):
    (tmp_path / "packed_lengths_step_0.jsonl").write_text(
        '{"step": 0, "input": 100, "output": [10, 20, 16000]}\n{"step": 0, "input": 50, "output": [5, 5, 5]}\n')
    response = length_distribution(TraceLength(kind="trace", path=str(tmp_path)), "output")
    prompt = length_distribution(TraceLength(kind="trace", path=str(tmp_path)), "input")
    assert response.clipped_mean(16000) == pytest.approx((10 + 20 + 16000 + 15) / 6)
    assert response.clipped_fraction(16000) == pytest.approx(1 / 6)
    assert prompt.clipped_mean(10_000) == pytest.approx(75)


@pytest.mark.parametrize("model", [
    {"kind": "lognormal", "median_tokens": 600, "sigma": 0.9, "loc_tokens": -20},
    {"kind": "gamma", "mean_tokens": 800, "shape": 1.5},
    {"kind": "gaussian_mixture", "components": [{"weight": 1, "mean_tokens": 500, "std_tokens": 100},
                                                {"weight": 1, "mean_tokens": 2000, "std_tokens": 300}]},
    {"kind": "lognormal_mixture", "components": [{"weight": 2, "median_tokens": 400, "sigma": 0.5},
                                                 {"weight": 1, "median_tokens": 3000, "sigma": 0.8}]},
])
def test_every_continuous_length_model_scales_its_quantiles(model):
    adapter = TypeAdapter(StaticLengthModel)
    base = length_distribution(adapter.validate_python(model))
    tripled = length_distribution(adapter.validate_python({**model, "scale": 3.0}))
    u = np.linspace(0.05, 0.95, 7)
    assert np.allclose(tripled.ppf(u), 3.0 * base.ppf(u), rtol=1e-6)


def test_a_fixed_length_scales_to_whole_tokens():
    model = TypeAdapter(StaticLengthModel).validate_python({"kind": "fixed", "tokens": 101, "scale": 1.5})
    assert length_distribution(model).ppf([0.5])[0] == 152
