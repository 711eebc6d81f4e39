"""Length distributions: each YAML `kind` of length model becomes an object that samples lengths and answers the
statistics the estimator needs — the mean after clipping at the generation cap, and the fraction clipped.

A length model is one registered builder function (`@register_length_model("kind")`); adding one touches this file only.
Lengths are clipped, not resampled, at the cap: a response that would run longer stops at max_response_tokens, as
generation engines do (and as PolyTrace records it: a length equal to the cap was truncated).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.config.workload import (
    EmpiricalLength,
    FixedLength,
    GammaLength,
    LengthModel,
    LognormalLength,
    TraceLength,
)


@dataclass(frozen=True)
class LengthDistribution:
    """A distribution of token counts: a frozen scipy distribution, or a finite set of observed values."""

    name: str
    continuous: object | None = None  # scipy.stats frozen distribution
    values: np.ndarray | None = None  # observed lengths (empirical / trace)
    weights: np.ndarray | None = None

    def sample(self, rng: np.random.Generator, n: int, cap: int) -> np.ndarray:
        """n lengths, each at least 1 token and at most `cap`."""
        if self.values is not None:
            drawn = rng.choice(self.values, size=n, p=self.weights)
        else:
            drawn = np.rint(self.continuous.rvs(size=n, random_state=rng))
        return np.clip(drawn, 1, cap).astype(np.int64)

    def clipped_mean(self, cap: float) -> float:
        """E[min(X, cap)]."""
        if self.values is not None:
            return float(np.average(np.minimum(self.values, cap), weights=self.weights))
        dist = self.continuous
        # E[min(X, c)] = ∫₀^c P(X > x) dx, integrated exactly by scipy's expect over [0, c] plus c·P(X > c).
        body = dist.expect(lambda x: x, lb=0, ub=cap)
        return float(body + cap * dist.sf(cap))

    def clipped_fraction(self, cap: float) -> float:
        """P(X ≥ cap): the share of samples that hit the cap and are truncated."""
        if self.values is not None:
            return float(np.average(self.values >= cap, weights=self.weights))
        return float(self.continuous.sf(cap))

    def quantile(self, q: float, cap: float) -> float:
        if self.values is not None:
            order = np.argsort(self.values)
            cumulative = np.cumsum(self.weights[order] if self.weights is not None else np.ones(len(order)))
            index = int(np.searchsorted(cumulative / cumulative[-1], q))
            return float(min(self.values[order][min(index, len(order) - 1)], cap))
        return float(min(self.continuous.ppf(q), cap))


Builder = Callable[[LengthModel, str], LengthDistribution]
_BUILDERS: dict[str, Builder] = {}


def register_length_model(kind: str) -> Callable[[Builder], Builder]:
    def decorate(builder: Builder) -> Builder:
        _BUILDERS[kind] = builder
        return builder
    return decorate


def length_distribution(model: LengthModel, field: str = "output") -> LengthDistribution:
    """The distribution a YAML length model describes; `field` says which trace field to read ("input" or "output")."""
    return _BUILDERS[model.kind](model, field)


@register_length_model("fixed")
def _fixed(model: FixedLength, field: str) -> LengthDistribution:
    return LengthDistribution("fixed", values=np.array([model.tokens]))


@register_length_model("lognormal")
def _lognormal(model: LognormalLength, field: str) -> LengthDistribution:
    from scipy import stats  # scipy.stats takes a second to import; only continuous models need it

    return LengthDistribution("lognormal", continuous=stats.lognorm(s=model.sigma, scale=model.median_tokens))


@register_length_model("gamma")
def _gamma(model: GammaLength, field: str) -> LengthDistribution:
    from scipy import stats

    return LengthDistribution("gamma", continuous=stats.gamma(a=model.shape, scale=model.mean_tokens / model.shape))


@register_length_model("empirical")
def _empirical(model: EmpiricalLength, field: str) -> LengthDistribution:
    weights = None
    if model.weights is not None:
        weights = np.asarray(model.weights, dtype=float)
        weights = weights / weights.sum()
    return LengthDistribution("empirical", values=_scaled(model.tokens, model.scale), weights=weights)


@register_length_model("trace")
def _trace(model: TraceLength, field: str) -> LengthDistribution:
    return LengthDistribution("trace", values=_scaled(read_packed_lengths(Path(model.path), field), model.scale))


def _scaled(tokens: list[int], scale: float) -> np.ndarray:
    values = np.asarray(tokens)
    return values if scale == 1.0 else np.maximum(1, np.rint(values * scale)).astype(np.int64)


def read_packed_lengths(path: Path, field: str) -> list[int]:
    """Lengths from PolyTrace packed-length logs: a JSONL file, or a folder of packed_lengths_step_*.jsonl files.

    Each line is one prompt: `input` is its prompt length, `output` the list of its n response lengths.
    """
    files = sorted(path.glob("packed_lengths_step_*.jsonl")) if path.is_dir() else [path]
    lengths: list[int] = []
    for file in files:
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            value = record[field]
            lengths.extend(value if isinstance(value, list) else [value])
    return lengths
