"""Length models that reproduce a logged step's length statistics (what `rlsim replay` rebuilds a run's workload from).

A training log keeps a few numbers per step, not the lengths: verl logs the mean and the longest response and
prompt, and the share of responses cut at the cap (`response_length/clip_ratio`). Each step becomes a lognormal, the
way the V10 validation scenarios were written by hand (scenarios/validation/v10-*.yaml):

responses   lognormal cut at the cap. Its upper tail is pinned by the clipped share (P(X ≥ cap) = clip ratio) or,
            when none was clipped or the share is not logged, by the longest response, taken as the draw's
            n/(n + 1) quantile for n responses; σ is then the one at which the mean of the cut draws is the logged mean.
prompts     lognormal from the logged mean and longest prompt the same way (the longest the n/(n + 1) quantile).

Pinning a quantile leaves one unknown, σ, and the mean of the cut draws falls as σ grows (every draw below the
pinned quantile shrinks towards 0), so a bracketing search finds it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_SIGMAS = np.geomspace(1e-3, 6.0, 400)  # the bracketing grid of σ; the root is then refined by Brent's method


@dataclass(frozen=True)
class Lognormal:
    median_tokens: float
    sigma: float

    def model(self) -> dict[str, object]:
        """As a scenario's length model (six significant digits: the YAML stays readable)."""
        return {"kind": "lognormal", "median_tokens": float(f"{self.median_tokens:.6g}"),
                "sigma": float(f"{self.sigma:.6g}")}


def cut_mean(median: np.ndarray | float, sigma: np.ndarray | float, cap: float) -> np.ndarray:
    """E[clip(X, 1, cap)] for X lognormal(median, σ): the mean rlsim's sampler draws (it keeps lengths in [1, cap])."""
    from scipy.special import ndtr

    mu, s = np.log(median), np.asarray(sigma, dtype=float)
    below_one = ndtr((0.0 - mu) / s)
    above_cap = 1.0 - ndtr((math.log(cap) - mu) / s)
    inside = np.exp(mu + s * s / 2) * (ndtr((math.log(cap) - mu - s * s) / s) - ndtr((0.0 - mu - s * s) / s))
    return below_one + inside + cap * above_cap


def pinned_lognormal(mean: float, anchor: float, quantile: float, cap: float) -> Lognormal:
    """The lognormal whose `quantile` is `anchor` and whose draws, kept in [1, cap], average `mean`."""
    from scipy.optimize import brentq
    from scipy.special import ndtri

    z = float(ndtri(quantile))
    log_anchor = math.log(anchor)

    def excess(sigma: float) -> float:
        return float(cut_mean(math.exp(log_anchor - sigma * z), sigma, cap)) - mean

    gaps = cut_mean(np.exp(log_anchor - _SIGMAS * z), _SIGMAS, cap) - mean
    crossing = np.flatnonzero((gaps[:-1] > 0) & (gaps[1:] <= 0))
    if crossing.size:
        i = int(crossing[0])
        sigma = float(brentq(excess, _SIGMAS[i], _SIGMAS[i + 1], xtol=1e-9))
    else:  # the mean cannot be reached with this anchor (a log's rounding): the nearest σ on the grid
        sigma = float(_SIGMAS[int(np.argmin(np.abs(gaps)))])
    return Lognormal(math.exp(log_anchor - sigma * z), sigma)


def response_lognormal(mean: float, cap: int, responses: int, *, clip_ratio: float | None = None,
                       longest: float | None = None) -> Lognormal:
    """Responses of one logged step: `responses` draws cut at `cap` averaging `mean`, with `clip_ratio` of them cut
    or, when that is 0 or unknown, the longest as the n/(n + 1) quantile (the cap when the longest is unknown)."""
    mean = min(max(mean, 1.0), cap)
    if clip_ratio is not None and 0 < clip_ratio < 1:
        return pinned_lognormal(mean, cap, 1.0 - clip_ratio, cap)
    anchor = min(longest if longest is not None else cap, cap)
    return pinned_lognormal(mean, max(anchor, mean), responses / (responses + 1), cap)


def prompt_lognormal(mean: float, longest: float, prompts: int, cap: int) -> Lognormal:
    """Prompts of one logged step: `prompts` draws kept under `cap` averaging `mean`, the longest at the
    n/(n + 1) quantile."""
    mean = min(max(mean, 1.0), cap)
    return pinned_lognormal(mean, max(min(longest, cap), mean), prompts / (prompts + 1), cap)


# verl's names for a step's length statistics (verl/trainer/ppo/metric_utils.py, compute_data_metrics).
RESPONSE_MEAN, RESPONSE_LONGEST, RESPONSE_CLIPPED = ("response_length/mean", "response_length/max",
                                                     "response_length/clip_ratio")
PROMPT_MEAN, PROMPT_LONGEST = "prompt_length/mean", "prompt_length/max"


def logged_length_fields(steps: Sequence[Mapping[str, float]], *, max_response_tokens: int, max_prompt_tokens: int,
                         prompts_per_step: int, samples_per_prompt: int) -> dict[str, Any]:
    """`workload:` fields whose lengths at policy version k reproduce the k-th logged step's statistics: a drift
    model with one point per step, each held until the next (`interpolation: step`). Prompts drift too when every
    step logs their mean and longest; otherwise the scenario's prompt model stays."""
    responses = prompts_per_step * samples_per_prompt

    def response(metrics: Mapping[str, float]) -> dict[str, object]:
        return response_lognormal(metrics[RESPONSE_MEAN], max_response_tokens, responses,
                                  clip_ratio=metrics.get(RESPONSE_CLIPPED), longest=metrics.get(RESPONSE_LONGEST)).model()

    fields: dict[str, Any] = {"response_tokens": _drift([response(m) for m in steps])}
    if all(PROMPT_MEAN in m and PROMPT_LONGEST in m for m in steps):
        fields["prompt_tokens"] = _drift([prompt_lognormal(m[PROMPT_MEAN], m[PROMPT_LONGEST], prompts_per_step,
                                                           max_prompt_tokens).model() for m in steps])
    return fields


def pooled_length_fields(steps: Sequence[Mapping[str, float]], *, max_response_tokens: int, max_prompt_tokens: int,
                         prompts_per_step: int, samples_per_prompt: int) -> dict[str, Any]:
    """`workload:` fields of one steady model for all of `steps`, for what-ifs on the run: the lognormal with the
    steps' average logged mean and clipped share (or, with none clipped, their longest response as the longest of all
    their responses), and prompts likewise from their average mean and longest."""
    def average(key: str) -> float | None:
        values = [m[key] for m in steps if key in m]
        return sum(values) / len(values) if values else None

    responses = prompts_per_step * samples_per_prompt * len(steps)
    clipped = average(RESPONSE_CLIPPED)
    longest = max((m[RESPONSE_LONGEST] for m in steps if RESPONSE_LONGEST in m), default=None)
    mean = average(RESPONSE_MEAN)
    if mean is None:
        raise ValueError(f"no step logs {RESPONSE_MEAN}")
    fields: dict[str, Any] = {"response_tokens": response_lognormal(
        mean, max_response_tokens, responses, clip_ratio=clipped, longest=longest).model()}
    prompt_mean = average(PROMPT_MEAN)
    prompt_longest = max((m[PROMPT_LONGEST] for m in steps if PROMPT_LONGEST in m), default=None)
    if prompt_mean is not None and prompt_longest is not None:
        fields["prompt_tokens"] = prompt_lognormal(prompt_mean, prompt_longest, prompts_per_step * len(steps),
                                                   max_prompt_tokens).model()
    return fields


def _drift(models: list[dict[str, object]]) -> dict[str, Any]:
    return {"kind": "drift", "interpolation": "step",
            "points": [{"step": version, "model": model} for version, model in enumerate(models)]}
