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

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsim.config.workload import (
    Categorical,
    GroupCorrelation,
    JointComponent,
    JointGaussianMixture,
    LatencyComponent,
    LognormalMixtureLatency,
    SandboxReward,
)
from rlsim.fields import Frozen
from rlsim.workload.length_models.empirical import EmpiricalLength
from rlsim.workload.length_models.lognormal_mixture import LognormalComponent, LognormalMixtureLength
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
    censored = unique >= cap if cap is not None else np.zeros(len(unique), bool)
    half = resolution / 2
    lo = np.log(np.maximum(unique - half, half))
    hi = np.where(censored, np.inf, np.log(unique + half))
    if cap is not None:
        lo = np.where(censored, np.log(cap - half), lo)
    if len(unique) > MAX_INTERVALS:
        lo, hi, counts = _binned(lo, hi, counts)
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


MAX_INTERVALS = 1024  # finer data is binned: the likelihood then costs the same for 10⁴ or 10⁶ observations


def _binned(lo: np.ndarray, hi: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge observation intervals (sorted, in ln space) into MAX_INTERVALS bins of equal width in ln x; censored
    intervals (open above) stay as they are."""
    open_top = np.isinf(hi)
    edges = np.linspace(lo[~open_top].min(), hi[~open_top].max(), MAX_INTERVALS + 1)
    which = np.clip(np.searchsorted(edges, (lo[~open_top] + hi[~open_top]) / 2, side="right") - 1, 0, MAX_INTERVALS - 1)
    binned = np.bincount(which, weights=counts[~open_top], minlength=MAX_INTERVALS)
    keep = binned > 0
    return (np.concatenate([edges[:-1][keep], lo[open_top]]), np.concatenate([edges[1:][keep], hi[open_top]]),
            np.concatenate([binned[keep], counts[open_top]]))


def best_log_mixture(values: Sequence[float], *, cap: float | None = None, max_components: int = 5,
                     resolution: float = 1.0) -> MixtureFit:
    """The mixture with the lowest BIC among 1..max_components components."""
    best = None
    worse = 0
    for k in range(1, max_components + 1):
        fit = fit_log_mixture(values, cap=cap, components=k, resolution=resolution)
        if best is None or fit.bic < best.bic:
            best, worse = fit, 0
        else:
            worse += 1
            if worse == 2:  # two more components did not pay for themselves: more will not either
                break
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
    """The copula ρ whose sampled groups of `group_size` have an ICC of ln(length) equal to `target_icc`."""
    from scipy.special import ndtr

    # Lengths as a function of the normal score, tabulated once: every trial ρ then costs an interpolation, not a
    # quantile search (the table's step of 0.0006 in score moves a length by well under a token).
    grid = np.linspace(-8.0, 8.0, 25601)
    table = np.clip(response.ppf(ndtr(grid)), 1, cap if cap is not None else np.inf)
    return calibrate_correlation(lambda scores: log_length_icc(np.rint(np.interp(scores, grid, table))),
                                 target_icc, group_size)


def calibrate_correlation(icc_of_scores, target_icc: float, group_size: int) -> float:
    """The ρ at which `icc_of_scores` of groups of normal scores √ρ·d + √(1 − ρ)·ε equals `target_icc` (bisection with
    common random numbers, so the ICC is monotone in ρ and the answer deterministic)."""
    if target_icc <= 0:
        return 0.0
    rng = np.random.default_rng(FIT_SEED)
    difficulty = rng.standard_normal((CALIBRATION_GROUPS, 1))
    noise = rng.standard_normal((CALIBRATION_GROUPS, group_size))

    def icc_at(rho: float) -> float:
        return icc_of_scores(math.sqrt(rho) * difficulty + math.sqrt(1 - rho) * noise)

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



# ------------------------------------------------------------------------------------------------ whole traces


def response_cap(values: Sequence[int]) -> int | None:
    """The generation cap a trace was recorded under, when it shows: its largest length, if more than one response
    reached it (a length that several hit is a limit, not a coincidence)."""
    values = np.asarray(values)
    top = int(values.max())
    return top if int((values == top).sum()) > 1 else None


def fit_packed(path: Path, cap: int | None = None, *, drift: bool = False) -> dict[str, Any]:
    """Workload fields for a packed-length trace: prompt and response length models and the group correlation;
    with `drift`, a response model per recorded step (linearly interpolated between them)."""
    from rlsim.traces import read_packed
    from rlsim.workload.lengths import length_distribution

    steps = read_packed(path)
    groups = [g.response_tokens for step in steps for g in step]
    prompts = [g.prompt_tokens for step in steps for g in step]
    flat = np.concatenate(groups)
    cap = cap if cap is not None else response_cap(flat)
    response = lognormal_mixture_model(best_log_mixture(flat, cap=cap))
    fields: dict[str, Any] = {
        "prompt_tokens": _dump(fit_lengths(prompts)),
        "response_tokens": _dump(response),
        "groups": _dump(fit_groups(prompts, groups, length_distribution(response), cap)),
    }
    if drift:
        points = []
        for step in steps:
            values = np.concatenate([g.response_tokens for g in step])
            model = lognormal_mixture_model(best_log_mixture(values, cap=cap, max_components=2))
            points.append({"step": len(points), "model": _dump(model)})
        fields["response_tokens"] = {"kind": "drift", "interpolation": "linear", "points": points}
    return fields


def fit_multiturn(path: Path) -> dict[str, Any]:
    """Workload fields for a multi-turn trace: prompt lengths, the turns model, and the group correlation of the
    number of turns. A turn's concurrent calls are fitted as one (calls_per_turn 1): its latency the slowest call's,
    its response tokens all the calls' (Search-R1's trace makes one call in 99 % of its turns), which is what the
    engines wait for; an environment pool then sees one call per turn."""
    from scipy.special import ndtr

    from rlsim.traces import multiturn_groups, read_multiturn
    from rlsim.workload.multiturn import Counts

    trajectories = read_multiturn(path)
    tool_turns = [[t.generated_tokens for t in tr.turns[:-1]] for tr in trajectories]
    appended = [tr.appended_after(i) for tr in trajectories for i in range(len(tr.turns) - 1)]
    latency = [max(t.tool_latencies_s, default=0.0) for tr in trajectories for t in tr.turns[:-1]]
    turns = categorical([len(tr.turns) for tr in trajectories])
    multiturn = {
        "turns": _dump(turns),
        "tool_turn_tokens": _dump(fit_lengths([x for row in tool_turns for x in row])),
        "answer_turn_tokens": _dump(fit_lengths([tr.turns[-1].generated_tokens for tr in trajectories])),
        "tool_latency": _dump(latency_mixture_model(best_log_mixture(latency, resolution=1e-6))),
        "tool_response_tokens": _dump(fit_lengths([max(a, 1) for a in appended])),
        "within_trajectory_correlation": _round(max(0.0, log_length_icc(tool_turns))),
    }
    groups = multiturn_groups(trajectories)
    counts = Counts(turns)
    size = int(round(float(np.mean([len(g) for g in groups]))))
    rho = calibrate_correlation(lambda scores: intraclass_correlation(counts.at(ndtr(scores)).reshape(scores.shape)),
                                intraclass_correlation([[len(t.turns) for t in g] for g in groups]), size)
    return {
        "prompt_tokens": _dump(fit_lengths([tr.prompt_tokens for tr in trajectories])),
        "multiturn": multiturn,
        "groups": {"within_group_correlation": rho},
    }


RLLM_REWARD_THREADS = 48
"""Threads rllm's DeepCoder RewardManager scores a rank's batch with (ThreadPoolExecutor(max_workers=48) in
rllm/verl/verl/trainer/main_ppo.py of the PolyTrace repository): the concurrency of its reward timings."""


def fit_reward_timings(path: Path, threads: int = RLLM_REWARD_THREADS) -> dict[str, Any]:
    """A sandbox reward fitted to recorded batch scoring times. Each record is one rank's batch on `threads` workers;
    the ranks of a step score side by side, so the pool a scenario needs has threads × ranks workers."""
    from rlsim.traces import read_reward_timings

    timings = read_reward_timings(path)
    sizes = {t.batch_size for t in timings}
    if len(sizes) != 1:
        raise ValueError(f"{path}: reward batches of different sizes {sorted(sizes)} cannot be fitted together")
    per_rank = fit_sandbox([t.seconds for t in timings], sizes.pop(), threads)
    ranks = max(sum(1 for t in timings if t.step == step) for step in {t.step for t in timings})
    return _dump(per_rank.model_copy(update={"concurrency": threads * ranks}))


def production_joint(path: Path, task: str = "math_task") -> dict[str, Any]:
    """The 2-D Gaussian mixture of PolyTrace's enhanced_task_distribution_parameters.json (`<task>.gmm_parameters`:
    weights, means and full covariances of [prompt, response]) as `joint_tokens`. Its `input_distribution` and
    `output_distribution` entries are separate scipy lognorm fits (s, loc, scale) whose KS statistics (0.20, 0.11)
    show they fit poorly; the mixture is what PolyTrace samples from."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    try:
        gmm = data[task]["gmm_parameters"]
        weights, means, covariances = gmm["weights"], gmm["means"], gmm["covariances"]
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path}: no {task}.gmm_parameters with weights, means and covariances ({err})") from None
    components = [JointComponent(weight=w, mean_tokens=tuple(m), covariance=tuple(tuple(row) for row in c))
                  for w, m, c in zip(weights, means, covariances, strict=True)]
    return {"joint_tokens": _dump(JointGaussianMixture(kind="joint_gaussian_mixture", components=components))}


def fit_trace(path: Path, *, cap: int | None = None, drift: bool = False) -> dict[str, Any]:
    """Workload fields fitted to any PolyTrace trace: packed lengths (with a sandbox reward when the folder has
    reward timings, and the kept share when it has DAPO filter indices), multi-turn logs, a filter-indices file, or
    the production parameters JSON."""
    from rlsim.traces import REWARD_TIMINGS, step_files, trace_format
    from rlsim.workload.filters import kept_fraction

    if path.suffix == ".json":
        return production_joint(path)
    if path.name == "dapo_filter_indices.jsonl":
        return {"informative_group_fraction": _round(kept_fraction(path))}
    if trace_format(path) == "multiturn":
        return fit_multiturn(path)
    fields = fit_packed(path, cap, drift=drift)
    if path.is_dir() and step_files(path, REWARD_TIMINGS):
        fields["reward"] = fit_reward_timings(path)
    filters = path / "dapo_filter_indices.jsonl" if path.is_dir() else None
    if filters is not None and filters.exists():
        fields["informative_group_fraction"] = _round(kept_fraction(filters))
    return fields


def _dump(model: Frozen) -> dict[str, Any]:
    """A model as the YAML that selects it: defaults left out, tuples as lists."""
    return json.loads(model.model_dump_json(exclude_defaults=True)) | (
        {"kind": model.kind} if hasattr(model, "kind") else {})
