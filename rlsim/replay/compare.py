"""`rlsim replay`: simulate the steps a run logged, each with that step's logged lengths, and compare stage by stage.

The k-th step used is simulated as the run's k-th step: its lengths are policy version k's of a drift model with one
point per step (rlsim.workload.logged_lengths). A synchronous schedule generates step k's responses with version k,
so each simulated step draws its own logged step's lengths. Off-policy schedules train step k on responses drawn by
earlier versions (one step earlier for one-step-off), so their simulated steps see their logged lengths that much late.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsim.errors import Problem, ScenarioError
from rlsim.events import EventLog, StepRecord
from rlsim.replay.stages import SIDE_TIMERS, STEP, TIMER_PREFIX, timer_stages
from rlsim.runlog import LoggedStep, RunLog
from rlsim.workload.logged_lengths import (
    PROMPT_LONGEST,
    PROMPT_MEAN,
    RESPONSE_CLIPPED,
    RESPONSE_LONGEST,
    RESPONSE_MEAN,
    logged_length_fields,
)


@dataclass(frozen=True)
class TimerComparison:
    """One verl timer over the compared steps: logged (None where a step did not log it) and simulated seconds."""

    timer: str
    stages: tuple[str, ...]  # the rlsim stages it measures, summed
    logged: tuple[float | None, ...]
    simulated: tuple[float, ...]

    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        pairs = [(x, y) for x, y in zip(self.logged, self.simulated, strict=True) if x is not None]
        return np.array([x for x, _ in pairs]), np.array([y for _, y in pairs])

    def errors_pct(self) -> list[float | None]:
        """Per step: (simulated − logged) / logged, in %."""
        return [None if x is None or x == 0 else 100 * (y - x) / x
                for x, y in zip(self.logged, self.simulated, strict=True)]

    def means(self) -> tuple[float, float]:
        """Mean logged and mean simulated seconds over the steps that logged this timer."""
        logged, simulated = self._pairs()
        return float(logged.mean()), float(simulated.mean())

    def error_pct(self) -> float | None:
        """The error of the mean over steps, in %."""
        logged, simulated = self.means()
        return 100 * (simulated - logged) / logged if logged else None

    def mean_abs_error_pct(self) -> float | None:
        """The mean over steps of each step's |error|, in %."""
        errors = [abs(e) for e in self.errors_pct() if e is not None]
        return float(np.mean(errors)) if errors else None


@dataclass(frozen=True)
class Replay:
    scenario: str
    log: str
    steps: tuple[int, ...]  # the logged step numbers compared, in order
    missing: tuple[int, ...]  # step numbers between the first and last compared that the log lacks
    without_lengths: tuple[int, ...]  # steps logged without response_length/mean or any stage timer: left out
    side_steps: tuple[int, ...]  # steps that also validated or saved a checkpoint: their step time compared without
    timers: tuple[TimerComparison, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "log": self.log, "steps": list(self.steps), "missing_steps": list(self.missing),
            "steps_without_lengths": list(self.without_lengths),
            "steps_with_validation_or_checkpoint": list(self.side_steps),
            "timers": {t.timer: {"rlsim_stages": list(t.stages), "logged_s": list(t.logged),
                                 "simulated_s": list(t.simulated), "error_pct": t.errors_pct(),
                                 "mean_logged_s": t.means()[0], "mean_simulated_s": t.means()[1],
                                 "error_of_mean_pct": t.error_pct(), "mean_abs_error_pct": t.mean_abs_error_pct()}
                       for t in self.timers},
        }


def usable_steps(log: RunLog) -> tuple[list[LoggedStep], tuple[int, ...], tuple[int, ...]]:
    """The steps that can be replayed (a response mean and a stage timer logged), the step numbers missing between
    the first and the last of them, and the logged steps left out for lacking either."""
    used: list[LoggedStep] = []
    left_out: list[LoggedStep] = []
    for step in log.steps:
        has_timer = any(key.startswith(TIMER_PREFIX) for key in step.metrics)
        (used if RESPONSE_MEAN in step.metrics and has_timer else left_out).append(step)
    if not used:
        raise ScenarioError(Problem(f"no step logs both {RESPONSE_MEAN} and a timing_s/* timer", file=log.file,
                                    valid="verl's per-step metrics (trainer.logger=console, or a tracker's export)"))
    logged = {s.step for s in log.steps}
    missing = tuple(n for n in range(used[0].step, used[-1].step + 1) if n not in logged)
    return used, missing, tuple(s.step for s in left_out)


def logged_seconds(step: LoggedStep, timer: str) -> float | None:
    """What a step logged for `timer`; the step time without the validation and checkpoint it may include."""
    value = step.metrics.get(TIMER_PREFIX + timer)
    if value is None or timer != STEP:
        return value
    return value - sum(step.metrics.get(TIMER_PREFIX + side, 0.0) for side in SIDE_TIMERS)


def replay_steps(scenario_path: str | Path, steps: Sequence[LoggedStep],
                 overrides: Mapping[str, Any] | None = None) -> tuple[TimerComparison, ...]:
    """Simulate `steps` (each with its logged lengths) on the scenario and compare every timer they log."""
    workload = logged_workload(scenario_path, steps, overrides)
    return compare_steps(scenario_path, steps, workload, overrides)


def logged_workload(scenario_path: str | Path, steps: Sequence[LoggedStep],
                    overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Overrides that give the scenario one simulated step per logged step, each drawing lengths with that step's
    logged statistics.

    A step's lengths are a draw from the rebuilt model, whose mean differs from the model's by the draw's sampling
    error (a few % for a batch of hundreds), and its longest by more. The log holds the batch's own statistics, so one
    correction follows: the steps are simulated once, and each step's targets (means, longest, clipped share) scaled
    by logged over drawn; the same seed draws the same quantiles again, so the second batch comes out close to the
    logged statistics."""
    targets = [dict(s.metrics) for s in steps]
    fields = _length_overrides(scenario_path, targets, overrides)
    first = simulate_steps(scenario_path, {**(overrides or {}), **fields})
    drawn = drawn_statistics(first)
    corrected = [_corrected(t, drawn.get(k, {})) for k, t in enumerate(targets)]
    return _length_overrides(scenario_path, corrected, overrides)


def _length_overrides(scenario_path: str | Path, targets: Sequence[Mapping[str, float]],
                      overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    from rlsim.config import load_scenario

    scenario = load_scenario(scenario_path, dict(overrides or {}))
    algorithm = scenario.algorithm
    fields = logged_length_fields(targets, max_response_tokens=algorithm.max_response_tokens,
                                  max_prompt_tokens=algorithm.max_prompt_tokens,
                                  prompts_per_step=algorithm.prompts_per_step,
                                  samples_per_prompt=algorithm.samples_per_prompt)
    workload: dict[str, Any] = {f"workload.{name}": value for name, value in fields.items()}
    if scenario.workload.step_length_sigma:  # the logged lengths carry the run's own step-to-step spread
        workload["workload.step_length_sigma"] = 0.0
    workload.update({"run.steps": len(targets), "run.warmup_steps": 0})
    return workload


def drawn_statistics(log: EventLog) -> dict[int, dict[str, float]]:
    """Per simulated step: the length statistics verl would log for the batch it trained."""
    responses: dict[int, list[int]] = defaultdict(list)
    truncated: dict[int, list[bool]] = defaultdict(list)
    prompts: dict[int, dict[int, int]] = defaultdict(dict)
    for s in log.sequences:
        if s.step_trained >= 0:
            responses[s.step_trained].append(s.response_tokens)
            truncated[s.step_trained].append(s.truncated)
            prompts[s.step_trained][s.group] = s.prompt_tokens
    return {step: {RESPONSE_MEAN: float(np.mean(lengths)), RESPONSE_LONGEST: float(np.max(lengths)),
                   RESPONSE_CLIPPED: float(np.mean(truncated[step])),
                   PROMPT_MEAN: float(np.mean(list(prompts[step].values()))),
                   PROMPT_LONGEST: float(np.max(list(prompts[step].values())))}
            for step, lengths in responses.items()}


def _corrected(target: Mapping[str, float], drawn: Mapping[str, float]) -> dict[str, float]:
    corrected = dict(target)
    for key in (RESPONSE_MEAN, RESPONSE_LONGEST, RESPONSE_CLIPPED, PROMPT_MEAN, PROMPT_LONGEST):
        if target.get(key) and drawn.get(key):
            corrected[key] = target[key] * target[key] / drawn[key]
    if corrected.get(RESPONSE_CLIPPED, 0.0) >= 1.0:
        corrected[RESPONSE_CLIPPED] = target[RESPONSE_CLIPPED]
    return corrected


def compare_steps(scenario_path: str | Path, steps: Sequence[LoggedStep], workload: Mapping[str, Any],
                  overrides: Mapping[str, Any] | None = None) -> tuple[TimerComparison, ...]:
    """Simulate the logged steps with `workload` (logged_workload's) and the overrides, and compare every timer."""
    from rlsim.config import load_scenario

    scenario = load_scenario(scenario_path, dict(overrides or {}))
    simulated = simulate_steps(scenario_path, {**(overrides or {}), **workload}).steps
    timers = timer_stages(scenario.placement.mode == "colocated")
    logged_timers = {key.removeprefix(TIMER_PREFIX) for s in steps for key in s.metrics}
    return tuple(TimerComparison(timer, stages, tuple(logged_seconds(s, timer) for s in steps),
                                 tuple(_simulated_seconds(record, stages) for record in simulated))
                 for timer, stages in timers.items() if timer in logged_timers)


def simulate_steps(scenario_path: str | Path, overrides: Mapping[str, Any]) -> EventLog:
    """The event log of the scenario's run with the overrides."""
    from rlsim.config import load_scenario
    from rlsim.config.bound import bind
    from rlsim.sim.run import simulate_log

    return simulate_log(bind(load_scenario(scenario_path, dict(overrides)))).log


def _simulated_seconds(record: StepRecord, stages: tuple[str, ...]) -> float:
    if stages == (STEP,):
        return record.seconds
    return sum(record.stages.get(stage, 0.0) for stage in stages)


def replay(scenario_path: str | Path, log: RunLog, overrides: Mapping[str, Any] | None = None) -> Replay:
    """Every usable logged step simulated and compared; which steps were missing or left out, and why."""
    used, missing, without = usable_steps(log)
    side = tuple(s.step for s in used if any(TIMER_PREFIX + t in s.metrics for t in SIDE_TIMERS))
    return Replay(str(scenario_path), log.file, tuple(s.step for s in used), missing, without, side,
                  replay_steps(scenario_path, used, overrides))
