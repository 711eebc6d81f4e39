"""`rlsim fit`: a few framework parameters fitted to a run's logged stage times, for what-ifs anchored on that run.

Each parameter is fitted to the timers it moves (FITTED), by least squares on the relative error of every fitted
step's timers, in the logarithm of the parameter (all are positive; a ratio is what a user reads). The steps are
split: the last `held_out` are not fitted, and their error before and after the fit says whether it carries to steps
it has not seen. The uncertainty of each value is the least-squares one, from the Jacobian at the optimum:
cov = s²·(JᵀJ)⁻¹ with s² the residual variance, so a fit that leaves large or inconsistent errors says so.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsim.errors import Problem, ScenarioError
from rlsim.replay.compare import TimerComparison, compare_steps, logged_workload, usable_steps
from rlsim.runlog import LoggedStep, RunLog

TRAINING_TIMERS = ("old_log_prob", "ref", "values", "update_actor", "update_critic")
GENERATION_TIMERS = ("gen", "generate_sequences")
DRIVER_TIMERS = ("adv",)
DIFF_STEP = 0.03  # in ln(value): each finite difference moves a parameter by 3 %, far above the simulation's jitter


@dataclass(frozen=True)
class Parameter:
    field: str  # under framework:
    timers: tuple[str, ...]  # the logged timers it is fitted to
    lower: float
    upper: float


def fitted_parameters(backend: str, logged_timers: set[str]) -> list[Parameter]:
    """The parameters a log can pin: the training kernels' efficiency from the training passes, the engine's CPU time
    per iteration from generation, the driver's per-step work from verl's adv timer; each only if its timers were
    logged."""
    efficiency = "megatron_kernel_efficiency" if backend == "megatron" else "training_kernel_efficiency"
    candidates = [Parameter(efficiency, TRAINING_TIMERS, 0.01, 1.0),
                  Parameter("engine_step_cpu_s", GENERATION_TIMERS, 1e-5, 1.0),
                  Parameter("trainer_step_overhead_s", DRIVER_TIMERS, 1e-4, 600.0)]
    return [p for p in candidates if logged_timers & set(p.timers)]


@dataclass(frozen=True)
class FittedValue:
    field: str
    value: float
    uncertainty: float | None  # one standard deviation; None when the steps cannot say (no more residuals than values)
    start: float  # the scenario's value
    timers: tuple[str, ...]


@dataclass(frozen=True)
class Fit:
    scenario: str
    log: str
    fitted_steps: tuple[int, ...]
    held_out_steps: tuple[int, ...]
    values: tuple[FittedValue, ...]
    held_out_error_before_pct: float | None  # mean |error| over the held-out steps' fitted timers
    held_out_error_after_pct: float | None
    fitted_error_before_pct: float
    fitted_error_after_pct: float

    def overlay_yaml(self) -> str:
        """The values as a `framework:` overlay for `rlsim run/plan --calibration`, with a header saying what they
        were fitted to."""
        lines = [f"# rlsim fit: framework parameters fitted to the stage times of {self.log}",
                 f"# on scenario {self.scenario}: {len(self.fitted_steps)} steps fitted "
                 f"({_span(self.fitted_steps)}), {len(self.held_out_steps)} held out ({_span(self.held_out_steps)}).",
                 f"# Fitted steps' mean |error| {self.fitted_error_before_pct:.1f} % -> {self.fitted_error_after_pct:.1f} %"
                 + (f"; held-out {self.held_out_error_before_pct:.1f} % -> {self.held_out_error_after_pct:.1f} %."
                    if self.held_out_error_before_pct is not None and self.held_out_error_after_pct is not None
                    else ".")]
        for v in self.values:
            spread = f" ± {v.uncertainty:.3g}" if v.uncertainty is not None else ""
            lines.append(f"# {v.field}: {v.value:.4g}{spread} (scenario: {v.start:.4g}), from {', '.join(v.timers)}")
        lines.append("# Anchors what-ifs on this run; the shipped validation never uses a fit.")
        lines.append("framework:")
        lines += [f"  {v.field}: {float(f'{v.value:.6g}')}" for v in self.values]
        return "\n".join(lines) + "\n"


def _span(steps: Sequence[int]) -> str:
    return f"{steps[0]}–{steps[-1]}" if steps else "none"


def split_steps(steps: Sequence[LoggedStep], held_out: int | None) -> tuple[list[LoggedStep], list[LoggedStep]]:
    """The steps fitted and the last `held_out` (default: a fifth, at least one of two or more) held out."""
    count = len(steps) // 5 if held_out is None else held_out
    if held_out is None and len(steps) >= 2:
        count = max(1, count)
    if count < 0 or count >= len(steps):
        raise ScenarioError(Problem(f"cannot hold out {count} of {len(steps)} steps", file="rlsim fit --held-out",
                                    valid=f"0 to {len(steps) - 1}"))
    return list(steps[:len(steps) - count]), list(steps[len(steps) - count:])


def mean_abs_error_pct(comparisons: Sequence[TimerComparison], timers: set[str]) -> float | None:
    errors = [abs(e) for c in comparisons if c.timer in timers for e in c.errors_pct() if e is not None]
    return float(np.mean(errors)) if errors else None


def fit(scenario_path: str | Path, log: RunLog, *, held_out: int | None = None,
        overrides: Mapping[str, Any] | None = None) -> Fit:
    from scipy.optimize import least_squares

    from rlsim.config import load_scenario

    overrides = dict(overrides or {})
    scenario = load_scenario(scenario_path, overrides)
    used, _, _ = usable_steps(log)
    fitted, held = split_steps(used, held_out)
    logged_timers = {key.removeprefix("timing_s/") for s in fitted for key in s.metrics}
    parameters = fitted_parameters(scenario.placement.training.backend, logged_timers)
    if not parameters:
        raise ScenarioError(Problem("no timer that a fitted parameter moves", file=log.file,
                                    valid="timing_s/ of " + ", ".join(TRAINING_TIMERS + GENERATION_TIMERS + DRIVER_TIMERS)))
    timers = {t for p in parameters for t in p.timers} & logged_timers
    start = np.array([getattr(scenario.framework, p.field) for p in parameters], dtype=float)
    fitted_workload = logged_workload(scenario_path, fitted, overrides)
    cache: dict[tuple[float, ...], tuple[TimerComparison, ...]] = {}

    def compared(log_values: np.ndarray, steps: list[LoggedStep], workload: Mapping[str, Any]):
        values = {f"framework.{p.field}": float(math.exp(x)) for p, x in zip(parameters, log_values, strict=True)}
        return compare_steps(scenario_path, steps, workload, {**overrides, **values})

    def residuals(log_values: np.ndarray) -> np.ndarray:
        key = tuple(np.round(log_values, 12))
        if key not in cache:
            cache[key] = compared(log_values, fitted, fitted_workload)
        return np.array([e / 100 for c in cache[key] if c.timer in timers for e in c.errors_pct() if e is not None])

    x0 = np.log(start)
    lower = np.log([p.lower for p in parameters])
    upper = np.log([p.upper for p in parameters])
    result = least_squares(residuals, np.clip(x0, lower, upper), bounds=(lower, upper), x_scale=1.0,
                           diff_step=DIFF_STEP / np.maximum(1.0, np.abs(x0)), method="trf")
    values = np.exp(result.x)
    uncertainties = _uncertainties(result.jac, result.fun, values)
    before = residuals(x0)
    after = residuals(result.x)
    held_before = held_after = None
    if held:
        held_workload = logged_workload(scenario_path, held, overrides)
        held_before = mean_abs_error_pct(compared(x0, held, held_workload), timers)
        held_after = mean_abs_error_pct(compared(result.x, held, held_workload), timers)
    return Fit(str(scenario_path), log.file, tuple(s.step for s in fitted), tuple(s.step for s in held),
               tuple(FittedValue(p.field, float(v), u, float(s0), tuple(t for t in p.timers if t in timers))
                     for p, v, u, s0 in zip(parameters, values, uncertainties, start, strict=True)),
               held_before, held_after, float(np.mean(np.abs(before)) * 100), float(np.mean(np.abs(after)) * 100))


def _uncertainties(jacobian: np.ndarray, residuals: np.ndarray, values: np.ndarray) -> list[float | None]:
    """One standard deviation of each value, from the Jacobian in ln(value): σ(ln v) times v."""
    count, parameters = jacobian.shape
    if count <= parameters:
        return [None] * parameters
    variance = float(residuals @ residuals) / (count - parameters)
    covariance = variance * np.linalg.pinv(jacobian.T @ jacobian)
    return [float(v * math.sqrt(max(c, 0.0))) for v, c in zip(values, np.diag(covariance), strict=True)]
