"""Length distributions: each YAML `kind` of length model becomes an object that maps uniform scores to lengths (its
quantile function, so correlated scores give correlated lengths with exactly the model's marginal), samples lengths,
and answers the statistics the estimator needs — the mean after clipping at the generation cap, and the fraction
clipped.

A length model is one file in rlsim/workload/length_models/: its parameter class and its builder, registered together
(`@register_length_model(GammaLength)`). Lengths are clipped, not resampled, at the cap: a response that would run
longer stops at max_response_tokens, as generation engines do (and as PolyTrace records it: a length equal to the cap
was truncated). Lengths below one token count as one.

`length_schedule` adds time: a `drift` model is a different distribution at each policy version.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar, get_args

import numpy as np

from rlsim import registry
from rlsim.config.workload import DriftLength, LengthModel, LengthParams, StaticLengthModel
from rlsim.registry import Registry

# Quantile-function grid for distributions known only through their quantile function (blends): midpoints of 4096
# equal slices, plus finer tails, so that means and the p99 are exact to well under a token.
_U_GRID = np.concatenate([np.geomspace(1e-7, 1 / 8192, 32, endpoint=False),
                          (np.arange(4096) + 0.5) / 4096,
                          1 - np.geomspace(1 / 8192, 1e-7, 32)[1:]])
_U_GRID.sort()


class LengthDistribution:
    """A distribution of token counts (or, for latencies, seconds). Subclasses give the quantile function `ppf`, the
    CDF and the clipped statistics; sampling and rounding are shared."""

    name: str

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Quantile function: the value below which a fraction u of the mass lies (floats, unrounded)."""
        raise NotImplementedError

    def cdf(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def clipped_mean(self, cap: float) -> float:
        """E[min(max(X, 1), cap)]."""
        raise NotImplementedError

    def clipped_fraction(self, cap: float) -> float:
        """P(X ≥ cap): the share of samples that hit the cap and are truncated."""
        raise NotImplementedError

    def lengths(self, u: np.ndarray, cap: int) -> np.ndarray:
        """Whole token counts for scores u, each at least 1 and at most `cap`."""
        return np.clip(np.rint(self.ppf(np.asarray(u, dtype=float))), 1, cap).astype(np.int64)

    def sample(self, rng: np.random.Generator, n: int, cap: int) -> np.ndarray:
        """n independent lengths, each at least 1 token and at most `cap`."""
        return self.lengths(rng.random(n), cap)

    def quantile(self, q: float, cap: float) -> float:
        return float(min(max(float(self.ppf(np.array([q]))[0]), 1.0), cap))


@dataclass(frozen=True, eq=False)
class ScipyLengths(LengthDistribution):
    """A frozen scipy.stats continuous distribution."""

    name: str
    dist: object

    def ppf(self, u):
        return self.dist.ppf(u)

    def cdf(self, x):
        return self.dist.cdf(x)

    def sample(self, rng: np.random.Generator, n: int, cap: int) -> np.ndarray:
        # scipy's own sampler (not the quantile function): faster, and the stream older seeds were pinned with.
        return np.clip(np.rint(self.dist.rvs(size=n, random_state=rng)), 1, cap).astype(np.int64)

    def clipped_mean(self, cap: float) -> float:
        dist = self.dist
        if cap <= 1:
            return float(cap)
        # E[clip(X, 1, c)] = P(X < 1)·1 + ∫₁^c x f(x) dx + c·P(X > c).
        body = _partial_mean(dist, 1, cap) if dist.cdf(cap) > dist.cdf(1) else 0.0
        return float(dist.cdf(1) + body + cap * dist.sf(cap))

    def clipped_fraction(self, cap: float) -> float:
        return float(self.dist.sf(cap))


def _partial_mean(dist, low: float, high: float) -> float:
    """∫ x f(x) dx over [low, high] for a frozen scipy distribution. In closed form for the families the length models
    build — lognormal, gamma, normal, given by keyword (X = loc + scale·Z) — since scipy's expect integrates
    numerically, about 16 ms a call, and `rlsim plan` estimates hundreds of candidates; by expect otherwise."""
    from scipy import special

    kwds = dist.kwds
    loc, scale = kwds.get("loc", 0.0), kwds.get("scale", 1.0)
    family = dist.dist.name
    if dist.args or family not in ("lognorm", "gamma", "norm"):
        return float(dist.expect(lambda x: x, lb=low, ub=high))
    z_low, z_high = (low - loc) / scale, (high - loc) / scale
    if family == "lognorm":
        # Z = exp(s·N): ∫ z f(z) dz = exp(s²/2)·Φ((ln z − s²)/s) between the bounds (0 below z = 0).
        s = kwds["s"]

        def first_moment(z: float) -> float:
            return float(special.ndtr((np.log(z) - s * s) / s)) if z > 0 else 0.0

        standard = np.exp(s * s / 2) * (first_moment(z_high) - first_moment(z_low))
    elif family == "gamma":
        # ∫ z f(z) dz = a·P(a + 1, z) between the bounds, P the regularized lower incomplete gamma function.
        a = kwds["a"]
        standard = a * (special.gammainc(a + 1, max(z_high, 0.0)) - special.gammainc(a + 1, max(z_low, 0.0)))
    else:
        # ∫ z φ(z) dz = −φ(z) between the bounds.
        standard = (np.exp(-z_low * z_low / 2) - np.exp(-z_high * z_high / 2)) / np.sqrt(2 * np.pi)
    return float(loc * (dist.cdf(high) - dist.cdf(low)) + scale * standard)


@dataclass(frozen=True, eq=False)
class FiniteLengths(LengthDistribution):
    """A finite set of observed values with weights (empirical lists, histograms, traces)."""

    name: str
    values: np.ndarray  # sorted ascending
    cumulative: np.ndarray  # cumulative weights, normalised to end at 1

    @classmethod
    def of(cls, name: str, values: Sequence[float], weights: Sequence[float] | None = None) -> FiniteLengths:
        values = np.asarray(values, dtype=float)
        weights = np.ones(len(values)) if weights is None else np.asarray(weights, dtype=float)
        order = np.argsort(values, kind="stable")
        cumulative = np.cumsum(weights[order])
        return cls(name, values[order], cumulative / cumulative[-1])

    def ppf(self, u):
        index = np.searchsorted(self.cumulative, np.asarray(u, dtype=float), side="left")
        return self.values[np.minimum(index, len(self.values) - 1)]

    def cdf(self, x):
        index = np.searchsorted(self.values, np.asarray(x, dtype=float), side="right")
        return np.concatenate([[0.0], self.cumulative])[index]

    def sample(self, rng: np.random.Generator, n: int, cap: int) -> np.ndarray:
        drawn = rng.choice(self.values, size=n, p=self._weights() if len(self.values) > 1 else None)
        return np.clip(np.rint(drawn), 1, cap).astype(np.int64)

    def _weights(self) -> np.ndarray:
        return np.diff(np.concatenate([[0.0], self.cumulative]))

    def clipped_mean(self, cap: float) -> float:
        return float(np.dot(self._weights(), np.clip(self.values, 1, cap)))

    def clipped_fraction(self, cap: float) -> float:
        return float(np.dot(self._weights(), self.values >= cap))


@dataclass(frozen=True, eq=False)
class MixtureLengths(LengthDistribution):
    """A weighted mixture of distributions. Its quantile is found by bisection on the CDF, between the smallest and
    largest component quantile at the same level (the mixture's CDF is their weighted average, so it lies there)."""

    name: str
    weights: np.ndarray  # normalised
    components: tuple[LengthDistribution, ...]

    @classmethod
    def of(cls, name: str, weights: Sequence[float], components: Sequence[LengthDistribution]) -> MixtureLengths:
        w = np.asarray(weights, dtype=float)
        return cls(name, w / w.sum(), tuple(components))

    def ppf(self, u):
        u = np.clip(np.asarray(u, dtype=float), 1e-15, 1 - 1e-15)
        if len(self.components) == 1:
            return self.components[0].ppf(u)
        each = np.array([c.ppf(u) for c in self.components])
        lo, hi = each.min(axis=0), each.max(axis=0)
        for _ in range(200):
            mid = (lo + hi) / 2
            below = self.cdf(mid) < u
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
            if np.all(hi - lo <= 1e-9 * np.maximum(1.0, np.abs(hi))):
                break
        return hi

    def cdf(self, x):
        return sum(w * c.cdf(x) for w, c in zip(self.weights, self.components, strict=True))

    def clipped_mean(self, cap: float) -> float:
        return float(sum(w * c.clipped_mean(cap) for w, c in zip(self.weights, self.components, strict=True)))

    def clipped_fraction(self, cap: float) -> float:
        return float(sum(w * c.clipped_fraction(cap) for w, c in zip(self.weights, self.components, strict=True)))


@dataclass(frozen=True, eq=False)
class BlendLengths(LengthDistribution):
    """(1 − a)·Q₀(u) + a·Q₁(u): the distribution halfway (a) along the straight line between two quantile functions
    (the Wasserstein geodesic); what a linear drift between two length models passes through."""

    name: str
    fraction: float
    start: LengthDistribution
    end: LengthDistribution

    def ppf(self, u):
        u = np.asarray(u, dtype=float)
        return (1 - self.fraction) * self.start.ppf(u) + self.fraction * self.end.ppf(u)

    @cached_property
    def _table(self) -> np.ndarray:
        """Q on the u-grid, made non-decreasing (a blend of quantile functions is one; this guards float noise)."""
        return np.maximum.accumulate(np.nan_to_num(self.ppf(_U_GRID), posinf=np.finfo(float).max / 4))

    def cdf(self, x):
        return np.interp(np.asarray(x, dtype=float), self._table, _U_GRID, left=0.0, right=1.0)

    def clipped_mean(self, cap: float) -> float:
        # ∫₀¹ clip(Q(u), 1, c) du: trapezoids over the u-grid, and the two tails beyond it at their edge values.
        clipped = np.clip(self._table, 1, cap)
        return float(np.trapezoid(clipped, _U_GRID) + _U_GRID[0] * clipped[0] + (1 - _U_GRID[-1]) * clipped[-1])

    def clipped_fraction(self, cap: float) -> float:
        return float(1 - self.cdf(np.array([cap]))[0])


# ------------------------------------------------------------------------------------------------ registry

Params = TypeVar("Params", bound=LengthParams)
Builder = Callable[[Params, str], LengthDistribution]


@dataclass(frozen=True)
class LengthModelKind(Generic[Params]):
    """A length model's registry entry: the parameters the YAML gives it, and the builder of its distribution from them
    (`field` says which trace field a recorded model reads: "input" or "output")."""

    params: type[Params]
    build: Builder[Params]


LENGTH_MODELS: Registry[LengthModelKind[Any]] = registry.LENGTH_MODELS


def register_length_model(params: type[Params]) -> Callable[[Builder[Params]], Builder[Params]]:
    """Decorator: file the builder of the length model whose parameter class is `params`, under its `kind` tag."""
    [kind] = get_args(params.model_fields["kind"].annotation)

    def decorate(build: Builder[Params]) -> Builder[Params]:
        LENGTH_MODELS.register(kind)(LengthModelKind(params, build))
        return build
    return decorate


def length_distribution(model: StaticLengthModel, field: str = "output") -> LengthDistribution:
    """The distribution a YAML length model describes; `field` says which trace field to read ("input" or "output").
    A drift model has no single distribution: use `length_schedule`."""
    if model.kind == "drift":
        raise ValueError("a drift model changes with the step: use length_schedule(model).at(step)")
    return LENGTH_MODELS[model.kind].build(model, field)


def scaled(tokens: Sequence[int], scale: float) -> np.ndarray:
    """Lengths times a length model's `scale`, whole and at least one token."""
    values = np.asarray(tokens)
    return values if scale == 1.0 else np.maximum(1, np.rint(values * scale)).astype(np.int64)


# ------------------------------------------------------------------------------------------------ over training


@dataclass(frozen=True)
class LengthSchedule:
    """A length distribution per policy version: constant, or a drift schedule between keyframes."""

    steps: tuple[int, ...]  # keyframe steps, increasing
    keyframes: tuple[LengthDistribution, ...]
    linear: bool = True

    def at(self, step: int) -> LengthDistribution:
        steps, frames = self.steps, self.keyframes
        if len(frames) == 1 or step <= steps[0]:
            return frames[0]
        if step >= steps[-1]:
            return frames[-1]
        right = int(np.searchsorted(steps, step, side="right"))
        left = right - 1
        if not self.linear or step == steps[left]:
            return frames[left]
        fraction = (step - steps[left]) / (steps[right] - steps[left])
        return BlendLengths(f"drift@{step}", fraction, frames[left], frames[right])

    def over_steps(self, steps: int) -> LengthDistribution:
        """The lengths of a run of `steps` steps taken together (each step equally): what one average step sees."""
        if len(self.keyframes) == 1:
            return self.keyframes[0]
        return MixtureLengths.of("run average", np.ones(steps), [self.at(s) for s in range(steps)])


def length_schedule(model: LengthModel, field: str = "output") -> LengthSchedule:
    if isinstance(model, DriftLength):
        return LengthSchedule(tuple(p.step for p in model.points),
                              tuple(length_distribution(p.model, field) for p in model.points),
                              model.interpolation == "linear")
    return LengthSchedule((0,), (length_distribution(model, field),))
