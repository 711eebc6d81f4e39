"""How many steps a run simulates and which of them it measures: after the pipeline has filled, by default.

An off-policy pipeline (one-step-off, async, or a synchronous run that carries unfinished responses over) starts empty:
its first steps wait for generation that later steps overlap with training, and they train the short responses that
finish first. Averaging them in gives the wrong answer — and, between a synchronous and an off-policy setup, the wrong
winner. So unless the scenario says otherwise, a run warms up for the fill, then measures `DEFAULT_MEASURED_STEPS`.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlsim.config.schedule_kind import schedule_kind
from rlsim.config.schema import Run, Schedule

# Steps measured after the warm-up when the scenario does not set run.steps.
DEFAULT_MEASURED_STEPS = 3
# A pipeline that may run η policy versions ahead fills for about η steps. The cap bounds the cost of large and unbounded
# staleness: generation only builds a lead that long when training is the bottleneck, and then the pace is training's
# from the first steps.
MAX_FILL_STEPS = 4
# How far ahead an async producer may run, in the run's steps, however loose the bound: far enough that the engines
# are as busy in the last measured step as in a longer run (work they start for later versions keeps them going),
# bounded so that η = .inf, or 10^6, admits a finite amount (what is generated past the run's end never trains).
MAX_LEAD_PER_STEP = 2


def max_lead(steps: int) -> int:
    return MAX_LEAD_PER_STEP * steps


def versions_ahead(schedule: Schedule) -> int:
    """How many policy versions generation may run ahead of training, as the schedule says (rlsim/sim/schedules/):
    ⌈η⌉ for async (the cap when unbounded), one for one-step-off and for a synchronous run that carries unfinished
    responses into the next step, none otherwise."""
    return schedule_kind(schedule.mode).versions_ahead(schedule)


def fill_steps(schedule: Schedule) -> int:
    """Warm-up steps before a run is in steady state: the pipeline's fill (capped), plus the first step, in which
    nothing overlaps yet. Zero for a synchronous run: each of its steps starts from empty engines."""
    ahead = versions_ahead(schedule)
    return min(ahead, MAX_FILL_STEPS) + 1 if ahead else 0


@dataclass(frozen=True)
class RunLength:
    steps: int
    warmup_steps: int


def resolve_run_length(run: Run, schedule: Schedule) -> RunLength:
    """Fill what the scenario left unset: the warm-up is the schedule's fill (at most all steps but the last), and the
    run is that warm-up plus DEFAULT_MEASURED_STEPS. What the scenario sets is kept exactly."""
    fill = fill_steps(schedule)
    if run.steps is None:
        warmup = fill if run.warmup_steps is None else run.warmup_steps
        return RunLength(warmup + DEFAULT_MEASURED_STEPS, warmup)
    warmup = min(fill, run.steps - 1) if run.warmup_steps is None else run.warmup_steps
    return RunLength(run.steps, warmup)


def short_warmup_warning(length: RunLength, fill: int, schedule_mode: str) -> str | None:
    """Why the measured window includes the pipeline's fill (`fill_steps`), or None when it does not."""
    if length.warmup_steps >= fill:
        return None
    off_policy = schedule_kind(schedule_mode).off_policy
    pipeline = f"an off-policy run ({schedule_mode})" if off_policy else "a synchronous run with partial rollouts"
    return (f"run.warmup_steps is {length.warmup_steps}, but {pipeline} is in steady state only from step {fill}: "
            f"the measured steps include the pipeline's fill, so the step time reads too slow; leave run.steps and "
            f"run.warmup_steps unset to measure after the fill, or set run.warmup_steps: {fill} (and run.steps "
            f"> {fill})")


def measured_window(length: RunLength) -> str:
    """Which steps the result averages, as a user reads it: 'steps 2–4 of 0–4 (2 warm-up)'."""
    first, last = length.warmup_steps, length.steps - 1
    span = f"step {last}" if first == last else f"steps {first}–{last}"
    return f"{span} of 0–{last} ({length.warmup_steps} warm-up)" if length.warmup_steps else f"{span} (no warm-up)"
