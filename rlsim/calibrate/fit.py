"""Fit the cost models' curves to raw measurements, and judge every fit by its held-out error.

Every curve has the form t = fixed + x / rate (reference §6): x is FLOPs for compute, bytes for memory traffic and
copies, and nccl-tests bytes × bus factor for collectives (so `rate` is the bus bandwidth and `fixed` is α). The fit
minimises the squared *relative* error, Σ((fixed + x/rate − t)/t)², which is linear in (fixed, 1/rate): small and
large sizes count alike, as they do in a MAPE. A negative fixed time is clamped to zero.

GEMMs are fitted the way `rlsim.costs.compute` prices them: x is the work after tile and wave quantization on the base
profile's SM count, and points that are memory-bound (their bytes at the HBM curve's rate, or the base profile's
without one, take longer than their padded work at the best rate seen) are left out, since the cost model prices
those by the memory curve. GEMM and attention curves keep
the cost model's fixed fill (GEMM_FILL_S, one constant the rollout engine's closed form relies on) and fit the rate.

Held-out error: each point is predicted by the fit to all the others (leave-one-out) and the mean absolute
percentage error of those predictions is reported. With fewer than three distinct sizes the fixed term cannot be
told from the rate with any point left to check it; then it is taken from the spec-sheet default (`prior`) and only
the rate is fitted.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rlsim.calibrate.raw import (
    CollectiveRow,
    CopyRow,
    DecodeRow,
    GemmRow,
    HostRow,
    LaunchRow,
    PrefillRow,
    RawFile,
)
from rlsim.costs.collectives import bus_factor
from rlsim.costs.compute import GEMM_FILL_S, MEMORY_HALF_BYTES, GPURates
from rlsim.errors import Problem, ScenarioError

MIN_SIZES_FOR_FIXED = 3


@dataclass(frozen=True)
class Sample:
    """One point of a curve: size x, median seconds, what was timed and where the number comes from."""

    size: float
    seconds: float
    label: str
    source: str


@dataclass(frozen=True)
class Prior:
    """The spec-sheet default of the fixed term, used when the sizes cannot pin it down: either a fixed time or a
    half-efficiency size (the size at which the fixed time equals the transfer time, so fixed = half / rate)."""

    fixed_s: float = 0.0
    half_size: float = 0.0


@dataclass(frozen=True)
class Fit:
    """A fitted curve t = fixed_s + size / rate and how well it predicts points it was not fitted to."""

    name: str
    fixed_s: float
    rate: float
    held_out_mape: float | None  # fraction; None with a single point
    in_sample_mape: float
    fixed_from_prior: bool
    samples: tuple[Sample, ...]
    excluded: int = 0  # points left out: memory-bound GEMMs, or faster than a held fixed term
    unit: str = "B"  # what size counts: "FLOP" or "B" (bytes)
    table_held_out_mape: float | None = None  # collectives: each inner point interpolated from its neighbours


def _solve(x: np.ndarray, t: np.ndarray, prior: Prior | None) -> tuple[float, float]:
    """(fixed, 1/rate) minimising the squared relative error; with a prior, only 1/rate is fitted."""
    u, v = 1.0 / t, x / t
    if prior is None:
        (fixed, slope), *_ = np.linalg.lstsq(np.column_stack([u, v]), np.ones_like(t), rcond=None)
        if fixed >= 0:
            return float(fixed), float(slope)
        fixed = 0.0
        return fixed, float(v.sum() / (v * v).sum())
    if prior.half_size:
        z = (x + prior.half_size) / t  # t = (x + half)/rate
        slope = float(z.sum() / (z * z).sum())
        return prior.half_size * slope, slope
    slope = float((v * (1 - prior.fixed_s * u)).sum() / (v * v).sum())
    return prior.fixed_s, slope


def fit_curve(name: str, samples: Sequence[Sample], prior: Prior, *, fit_fixed: bool = True, excluded: int = 0,
              unit: str = "B") -> Fit:
    """Fit t = fixed + size/rate to `samples` (see the module doc); `fit_fixed=False` keeps the prior's fixed term.
    Raises ScenarioError when the samples cannot define a curve."""
    if not fit_fixed:
        # The model cannot take less than its fixed term: a point faster than that is left out, not bent to.
        kept = [s for s in samples if s.seconds > prior.fixed_s]
        excluded += len(samples) - len(kept)
        samples = kept
    if not samples:
        raise ScenarioError(Problem(f"{name}: no measurements to fit"))
    x = np.array([s.size for s in samples], dtype=float)
    t = np.array([s.seconds for s in samples], dtype=float)
    use_prior = not fit_fixed or len(np.unique(x)) < MIN_SIZES_FOR_FIXED
    chosen = prior if use_prior else None
    fixed, slope = _solve(x, t, chosen)
    if slope <= 0:
        raise ScenarioError(Problem(f"{name}: the measured times do not grow with size, so no rate can be fitted",
                                    valid="measurements over sizes spanning at least a factor of 10"))
    held_out = None
    if len(samples) >= 2:
        errors = []
        for i in range(len(samples)):
            keep = np.arange(len(samples)) != i
            # The same form as the whole fit; two distinct sizes are enough to solve for both terms.
            sub_prior = chosen if chosen is not None or len(np.unique(x[keep])) >= 2 else prior
            f_i, s_i = _solve(x[keep], t[keep], sub_prior)
            errors.append(abs(f_i + x[i] * s_i - t[i]) / t[i])
        held_out = float(np.mean(errors))
    in_sample = float(np.mean(np.abs(fixed + x * slope - t) / t))
    return Fit(name, fixed, 1.0 / slope, held_out, in_sample, use_prior, tuple(samples), excluded, unit)


def interpolation_held_out(samples: Sequence[Sample]) -> float | None:
    """Leave-one-out error of log-log interpolation in a table of points (how collectives are priced between measured
    sizes): each inner point predicted from its two neighbours. None with fewer than three distinct sizes."""
    by_size: dict[float, list[float]] = {}
    for s in samples:
        by_size.setdefault(s.size, []).append(s.seconds)
    table = sorted((x, float(np.median(t))) for x, t in by_size.items())
    if len(table) < 3:
        return None
    errors = []
    for (x0, t0), (x, t), (x1, t1) in zip(table, table[1:], table[2:], strict=False):
        predicted = t0 * (t1 / t0) ** (np.log(x / x0) / np.log(x1 / x0))
        errors.append(abs(predicted - t) / t)
    return float(np.mean(errors))


# ------------------------------------------------------------------------------------------ curves of a raw file


@dataclass(frozen=True)
class Fits:
    """Every curve fitted from one raw file."""

    gemm: dict[str, Fit]  # by dtype
    attention_prefill: Fit | None
    hbm: Fit | None
    decode_attention: Fit | None
    host: dict[tuple[str, str], Fit]  # by (direction, memory)
    collectives: dict[tuple[str, int, int], Fit]  # by (op, ranks, nodes)
    launch_s: float | None
    unfitted: tuple[str, ...] = ()  # curves whose points define no rate, with the reason; left out of the profile

    def all(self) -> list[Fit]:
        found = [*self.gemm.values(), self.attention_prefill, self.hbm, self.decode_attention, *self.host.values(),
                 *self.collectives.values()]
        return [f for f in found if f is not None]


def _source(raw: RawFile, file: str, index: int) -> str:
    row = raw.measurements[index]
    return row.source or f"{file} measurements[{index}]"


def fit_raw(raw: RawFile, file: str, rates: GPURates) -> Fits:
    """Fit every curve the file has data for. `rates` (the base profile's) gives the SM count for GEMM quantization.
    A curve whose points define no rate (times that do not grow with size) is left out and named in `unfitted`."""
    rows = list(enumerate(raw.measurements))
    unfitted: list[str] = []

    def attempt(name: str, *args, **kwargs) -> Fit | None:
        try:
            return fit_curve(name, *args, **kwargs)
        except ScenarioError as err:
            unfitted.append(err.first.message)
            return None

    def samples(kind: type, size, label, where=lambda r: True) -> list[Sample]:
        return [Sample(size(r), r.median_s, label(r), _source(raw, file, i))
                for i, r in rows if isinstance(r, kind) and where(r)]

    hbm = None
    copies = samples(CopyRow, lambda r: r.bytes, lambda r: f"copy {r.bytes / 2:.3g} B")
    if copies:
        hbm = attempt("hbm copy", copies, Prior(half_size=MEMORY_HALF_BYTES))
    gemm = {}
    for dtype in sorted({r.dtype for _, r in rows if isinstance(r, GemmRow)}):
        gemm[dtype] = _fit_gemm(dtype, [(i, r) for i, r in rows if isinstance(r, GemmRow) and r.dtype == dtype],
                                raw, file, rates, hbm, attempt)
    prefill = samples(PrefillRow, lambda r: r.flops, lambda r: f"prefill {r.label or ''} b{r.batch} s{r.seq}".strip())
    decode = samples(DecodeRow, lambda r: r.bytes, lambda r: f"decode {r.label or ''} b{r.batch} ctx{r.context}")
    host = {}
    for direction, memory in sorted({(r.direction, r.memory) for _, r in rows if isinstance(r, HostRow)}):
        found = samples(HostRow, lambda r: r.bytes, lambda r: f"{r.direction} {r.memory} {r.bytes:.3g} B",
                        lambda r, d=direction, m=memory: (r.direction, r.memory) == (d, m))
        host[(direction, memory)] = attempt(f"{direction} {memory}", found, Prior(half_size=MEMORY_HALF_BYTES))
    collectives = {}
    for op, ranks, nodes in sorted({(r.kernel, r.ranks, r.nodes) for _, r in rows if isinstance(r, CollectiveRow)}):
        found = samples(CollectiveRow, lambda r: r.bytes * bus_factor(r.kernel, r.ranks),
                        lambda r: f"{r.kernel} {r.ranks} ranks {r.bytes:.3g} B",
                        lambda r, key=(op, ranks, nodes): (r.kernel, r.ranks, r.nodes) == key)
        fit = attempt(f"{op} {ranks} ranks {nodes} node(s)", found, Prior())
        collectives[(op, ranks, nodes)] = fit and replace(fit, table_held_out_mape=interpolation_held_out(found))
    launches = [r.median_s for _, r in rows if isinstance(r, LaunchRow) and r.mode == "eager"]
    return Fits(
        gemm={dtype: fit for dtype, fit in gemm.items() if fit is not None},
        attention_prefill=attempt("attention prefill", prefill, Prior(fixed_s=GEMM_FILL_S), fit_fixed=False,
                                  unit="FLOP") if prefill else None,
        hbm=hbm,
        decode_attention=attempt("decode attention", decode, Prior(half_size=MEMORY_HALF_BYTES)) if decode else None,
        host={key: fit for key, fit in host.items() if fit is not None},
        collectives={key: fit for key, fit in collectives.items() if fit is not None},
        launch_s=float(np.median(launches)) if launches else None,
        unfitted=tuple(unfitted),
    )


def _fit_gemm(dtype: str, rows: list[tuple[int, GemmRow]], raw: RawFile, file: str, rates: GPURates,
              hbm: Fit | None, attempt: Callable[..., Fit | None]) -> Fit | None:
    """GEMM curve on quantized work, leaving out the points the memory curve prices (see the module doc)."""
    unit = GPURates(rates.name, rates.peak_flops, 1.0, rates.hbm_bytes_per_s, rates.memory_bytes, rates.sm_count)
    points = [(Sample(unit.gemm_compute_seconds(r.m, r.n, r.k), r.median_s, f"gemm {dtype} {r.m}x{r.n}x{r.k}",
                      _source(raw, file, i)), r.bytes) for i, r in rows]
    # The memory rate the profile will have: the file's HBM curve, else the base profile's. The best padded rate seen
    # bounds the compute rate; a point is memory-bound if its bytes alone take longer at the memory rate.
    memory_rate = hbm.rate if hbm is not None else rates.hbm_bytes_per_s
    best = max(s.size / s.seconds for s, _ in points)
    compute_bound = [s for s, nbytes in points if s.size / best >= nbytes / memory_rate]
    if len(compute_bound) < 2:
        compute_bound = [s for s, _ in points]
    return attempt(f"gemm {dtype}", compute_bound, Prior(fixed_s=GEMM_FILL_S), fit_fixed=False,
                   excluded=len(points) - len(compute_bound), unit="FLOP")
