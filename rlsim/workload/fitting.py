"""Fitting workload models to recorded traces (what `rlsim workload fit` runs).

Lengths     a mixture of lognormals (a Gaussian mixture of ln length) by maximum likelihood, choosing the number of
            components by BIC. Token counts are whole numbers, so each observation x is the interval [x − ½, x + ½);
            a length at the generation cap was truncated there, so it is censored: only "≥ cap" is known. Prompt
            lengths that take few distinct values (vision tokens of a few video sizes) are kept as a histogram.
Groups      the within-group correlation is the intra-class correlation ICC(1) of ln(length) over a prompt's samples
            (one-way ANOVA estimator); the copula's ρ is calibrated so that sampled groups reproduce it.
Multi-turn  turns per trajectory as a histogram; tokens of tool-calling and answer turns, tool-response tokens and
            tool latency (the slowest call of a turn) as lognormal mixtures; their within-trajectory correlation.
Sandbox     per-sample latency lognormal(median, σ) on `concurrency` workers: a batch's scoring time is then
            median × T(σ), T the makespan of unit-median jobs, so ln-time's mean and spread fix median and σ.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlsim.config.workload import (
    Categorical,
    EmpiricalLength,
    GroupCorrelation,
    LatencyComponent,
    LognormalComponent,
    LognormalMixtureLatency,
    LognormalMixtureLength,
    SandboxReward,
)
from rlsim.workload.lengths import LengthDistribution

FIT_SEED = 20240917  # fits are deterministic: the same trace always gives the same model
CALIBRATION_GROUPS = 6000  # groups simulated when calibrating ρ: ICC's sampling error is then ~0.005


# ------------------------------------------------------------------------------------------------ statistics


@dataclass(frozen=True)
class Summary:
    """The statistics `rlsim workload show` prints and the fit tests compare."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float
    truncated: float  # fraction at or above the cap (0 without a cap)

    @classmethod
    def of(cls, values: Sequence[float], cap: float | None = None) -> Summary:
        v = np.asarray(values, dtype=float)
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return cls(len(v), float(v.mean()), float(p50), float(p90), float(p99), float(v.max()),
                   float((v >= cap).mean()) if cap is not None else 0.0)

    def as_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99,
                "max": self.max, "truncated": self.truncated}


def intraclass_correlation(groups: Sequence[Sequence[float]]) -> float:
    """ICC(1) of the values within groups (one-way random-effects ANOVA; unequal group sizes use the usual n₀).
    Groups of one sample carry no within-group information and are left out."""
    if isinstance(groups, np.ndarray) and groups.ndim == 2 and groups.shape[1] > 1:
        return _icc_equal_sizes(groups.astype(float))
    groups = [np.asarray(g, dtype=float) for g in groups if len(g) > 1]
    if len(groups) < 2:
        return 0.0
    sizes = np.array([len(g) for g in groups], dtype=float)
    total = sizes.sum()
    grand = sum(g.sum() for g in groups) / total
    between = sum(len(g) * (g.mean() - grand) ** 2 for g in groups) / (len(groups) - 1)
    within = sum(((g - g.mean()) ** 2).sum() for g in groups) / (total - len(groups))
    n0 = (total - (sizes**2).sum() / total) / (len(groups) - 1)
    denominator = between + (n0 - 1) * within
    return float((between - within) / denominator) if denominator > 0 else 0.0


def _icc_equal_sizes(values: np.ndarray) -> float:
    """ICC(1) of the rows of a (groups × n) array: the same estimator, vectorised."""
    groups, n = values.shape
    means = values.mean(axis=1)
    between = n * ((means - values.mean()) ** 2).sum() / (groups - 1)
    within = ((values - means[:, None]) ** 2).sum() / (groups * (n - 1))
    denominator = between + (n - 1) * within
    return float((between - within) / denominator) if denominator > 0 else 0.0


def log_length_icc(groups: Sequence[Sequence[float]]) -> float:
    """The within-group correlation rlsim reports: ICC(1) of ln(length)."""
    if isinstance(groups, np.ndarray):
        return intraclass_correlation(np.log(np.maximum(groups.astype(float), 1.0)))
    return intraclass_correlation([np.log(np.maximum(np.asarray(g, dtype=float), 1.0)) for g in groups])


def normal_scores(values: np.ndarray) -> np.ndarray:
    """Rank-based normal scores Φ⁻¹(rank / (N + 1)), ties sharing their average rank."""
    from scipy import stats

    return stats.norm.ppf(stats.rankdata(values) / (len(values) + 1))


# ------------------------------------------------------------------------------------------------ mixtures


@dataclass(frozen=True)
class MixtureFit:
    weights: np.ndarray
    mu: np.ndarray  # of ln x
    sigma: np.ndarray
    log_likelihood: float
    bic: float


def _interval_log_likelihood(params: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray, counts: np.ndarray) -> float:
    from scipy.special import log_ndtr, logsumexp

    logits, mu, log_sigma = params[:k], params[k:2 * k], params[2 * k:]
    log_w = logits - logsumexp(logits)
    sigma = np.exp(log_sigma)
    a = (lo[:, None] - mu) / sigma
    b = (hi[:, None] - mu) / sigma
    # log(Φ(b) − Φ(a)), stable in both tails: work on the side where the CDF is small.
    upper = a > 0
    first = np.where(upper, log_ndtr(-a), log_ndtr(b))
    second = np.where(upper, log_ndtr(-b), log_ndtr(a))
    with np.errstate(divide="ignore", invalid="ignore"):
        mass = first + np.log1p(-np.exp(np.minimum(second - first, -1e-300)))
    per_obs = logsumexp(log_w + mass, axis=1)
    return float(np.dot(counts, per_obs))


def fit_log_mixture(values: Sequence[float], *, cap: float | None = None, components: int,
                    resolution: float = 1.0) -> MixtureFit:
    """Maximum-likelihood mixture of `components` normals of ln x. Each value x stands for [x − r/2, x + r/2)
    (r = `resolution`: 1 for token counts); values ≥ cap are censored at the cap."""
    from scipy import optimize

    x = np.asarray(values, dtype=float)
    unique, counts = np.unique(x, return_counts=True)
    censored = cap is not None and unique >= cap
    censored = np.asarray(censored) if cap is not None else np.zeros(len(unique), bool)
    half = resolution / 2
    lo = np.log(np.maximum(unique - half, 1e-12 * max(resolution, 1e-12)))
    hi = np.where(censored, np.inf, np.log(unique + half))
    if cap is not None:
        lo = np.where(censored, np.log(cap - half), lo)
    logs = np.log(np.maximum(x[x < cap] if cap is not None else x, half))
    k = components
    # Start from equal-count slices of the sorted ln values: a mixture's components roughly own quantile ranges.
    slices = np.array_split(np.sort(logs), k)
    mu0 = np.array([s.mean() for s in slices])
    sigma0 = np.array([max(s.std(), 0.05) for s in slices])
    start = np.concatenate([np.zeros(k), mu0, np.log(sigma0)])

    def negative(params):
        return -_interval_log_likelihood(params, k, lo, hi, counts)

    bounds = [(-20, 20)] * k + [(float(logs.min()) - 3, float(np.log(cap if cap else x.max())) + 5)] * k \
        + [(math.log(0.01), math.log(5.0))] * k
    result = optimize.minimize(negative, start, method="L-BFGS-B", bounds=bounds)
    params = result.x
    logits = params[:k]
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    order = np.argsort(params[k:2 * k])
    log_likelihood = -float(result.fun)
    bic = (3 * k - 1) * math.log(len(x)) - 2 * log_likelihood
    return MixtureFit(weights[order], params[k:2 * k][order], np.exp(params[2 * k:])[order], log_likelihood, bic)


def best_log_mixture(values: Sequence[float], *, cap: float | None = None, max_components: int = 5,
                     resolution: float = 1.0) -> MixtureFit:
    """The mixture with the lowest BIC among 1..max_components components."""
    best = None
    for k in range(1, max_components + 1):
        fit = fit_log_mixture(values, cap=cap, components=k, resolution=resolution)
        if best is None or fit.bic < best.bic:
            best = fit
    assert best is not None
    return best


def lognormal_mixture_model(fit: MixtureFit) -> LognormalMixtureLength:
    return LognormalMixtureLength(kind="lognormal_mixture", components=[
        LognormalComponent(weight=_round(w), median_tokens=_round(math.exp(m)), sigma=_round(s))
        for w, m, s in zip(fit.weights, fit.mu, fit.sigma, strict=True)])


def latency_mixture_model(fit: MixtureFit) -> LognormalMixtureLatency:
    return LognormalMixtureLatency(kind="lognormal_mixture", components=[
        LatencyComponent(weight=_round(w), median_s=_round(math.exp(m)), sigma=_round(s))
        for w, m, s in zip(fit.weights, fit.mu, fit.sigma, strict=True)])


def _round(value: float) -> float:
    """Six significant digits: the YAML stays readable and the model does not change measurably."""
    return float(f"{value:.6g}")


def fit_lengths(values: Sequence[int], cap: int | None = None) -> LognormalMixtureLength | EmpiricalLength:
    """A length model for these observed lengths: a lognormal mixture, or — when the values take few distinct
    values (under 64, e.g. vision tokens of a handful of video sizes) — their histogram, which no smooth model fits."""
    values = np.asarray(values)
    distinct, counts = np.unique(values, return_counts=True)
    if len(distinct) < 64:
        return EmpiricalLength(kind="empirical", tokens=[int(v) for v in distinct],
                               weights=[float(c) for c in counts])
    return lognormal_mixture_model(best_log_mixture(values, cap=cap))


# ------------------------------------------------------------------------------------------------ groups


def calibrate_group_correlation(response: LengthDistribution, target_icc: float, group_size: int,
                                cap: int | None = None) -> float:
    """The copula ρ whose sampled groups of `group_size` have an ICC of ln(length) equal to `target_icc`
    (bisection with common random numbers, so the ICC is monotone in ρ and the answer deterministic)."""
    if target_icc <= 0:
        return 0.0
    from scipy.special import ndtr

    rng = np.random.default_rng(FIT_SEED)
    difficulty = rng.standard_normal((CALIBRATION_GROUPS, 1))
    noise = rng.standard_normal((CALIBRATION_GROUPS, group_size))
    # Lengths as a function of the normal score, tabulated once: every trial ρ then costs an interpolation, not a
    # quantile search (the table's step of 0.0006 in score moves a length by well under a token).
    grid = np.linspace(-8.0, 8.0, 25601)
    table = np.clip(response.ppf(ndtr(grid)), 1, cap if cap is not None else np.inf)

    def icc_at(rho: float) -> float:
        scores = math.sqrt(rho) * difficulty + math.sqrt(1 - rho) * noise
        return log_length_icc(np.rint(np.interp(scores, grid, table)))

    lo, hi = 0.0, 0.999
    if icc_at(hi) <= target_icc:
        return hi
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if icc_at(mid) < target_icc else (lo, mid)
    return _round((lo + hi) / 2)


def prompt_response_correlation(prompts: Sequence[int], groups: Sequence[Sequence[int]], rho: float) -> float:
    """The copula's prompt–difficulty correlation c from a trace: with normal scores a of prompts and z of
    responses, corr(a, mean z of a group) = c·√ρ / √(ρ + (1 − ρ)/n)."""
    if rho <= 0:
        return 0.0
    sizes = np.array([len(g) for g in groups])
    scores = normal_scores(np.concatenate([np.asarray(g, float) for g in groups]))
    means = np.array([chunk.mean() for chunk in np.split(scores, np.cumsum(sizes)[:-1])])
    prompt_scores = normal_scores(np.asarray(prompts, dtype=float))
    observed = float(np.corrcoef(prompt_scores, means)[0, 1])
    n = float(sizes.mean())
    return _round(float(np.clip(observed * math.sqrt(rho + (1 - rho) / n) / math.sqrt(rho), -1.0, 1.0)))


def fit_groups(prompts: Sequence[int], groups: Sequence[Sequence[int]], response: LengthDistribution,
               cap: int | None) -> GroupCorrelation:
    sizes = [len(g) for g in groups]
    target = log_length_icc(groups)
    rho = calibrate_group_correlation(response, target, int(round(float(np.mean(sizes)))), cap)
    return GroupCorrelation(within_group_correlation=rho,
                            prompt_response_correlation=prompt_response_correlation(prompts, groups, rho))


def categorical(values: Sequence[int]) -> Categorical:
    distinct, counts = np.unique(np.asarray(values), return_counts=True)
    return Categorical(values=[int(v) for v in distinct], weights=[float(c) for c in counts])


# ------------------------------------------------------------------------------------------------ sandbox reward


def fit_sandbox(batch_seconds: Sequence[float], batch_size: int, concurrency: int) -> SandboxReward:
    """Median and σ of a lognormal per-sample latency such that batches of `batch_size` samples on `concurrency`
    workers take as long as recorded: matched on the mean and standard deviation of ln(batch time)."""
    observed = np.log(np.asarray(batch_seconds, dtype=float))
    target_spread = float(observed.std(ddof=1)) if len(observed) > 1 else 0.0
    normals = np.random.default_rng(FIT_SEED).standard_normal((4000, batch_size))

    def log_makespans(sigma: float) -> np.ndarray:
        return np.log([_makespan(np.exp(sigma * row), concurrency) for row in normals])

    lo, hi = 0.0, 4.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if log_makespans(mid).std() < target_spread else (lo, mid)
    sigma = (lo + hi) / 2
    median = math.exp(float(observed.mean()) - float(log_makespans(sigma).mean()))
    return SandboxReward(kind="sandbox", median_latency_s=_round(median), latency_sigma=_round(sigma),
                         concurrency=concurrency)


def _makespan(durations: np.ndarray, workers: int) -> float:
    """When the last of these jobs ends, started in order on the earliest free of `workers` workers."""
    import heapq

    free = [0.0] * min(workers, len(durations))
    for duration in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + float(duration))
    return max(free)

