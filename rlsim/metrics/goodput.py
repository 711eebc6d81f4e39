"""Goodput over a long horizon: what a run of `run.horizon` delivers once failures, restarts, checkpoint saves and
restores, and evaluation passes are paid for, around the simulated steady-state step.

**The failure-free timeline.** Step *i* (1, 2, …) trains for the step time *T*; after step *i* an evaluation pass of
*E* seconds runs when *i* is a multiple of `test_freq` *f*, then a checkpoint save blocking *δ* seconds when *i* is a
multiple of `save_freq` *n*. In that "progress clock", step *i* has trained by
`A(i) = i·T + ⌊(i−1)/f⌋·E + ⌊(i−1)/n⌋·δ` and checkpoint *k* is complete at `C(k) = k·n·T + ⌊k·n/f⌋·E + k·δ`.

**Failures are sampled, not stepped.** Job-stopping failures arrive as a Poisson process, the sum of one per pool at
GPUs × the per-GPU rate (λ in all). From a position *p* of the progress clock the next failure comes after an
exponential wait *X*: the run reaches *p + X*, rolls back to the last checkpoint complete by then (the work since is
lost and done again), and recovers: restart *R* (detection and start-up) then restore *ρ* (reading the checkpoint).
A failure during recovery starts it over. Each failure is one draw, so a month of a large cluster is tens of
iterations, whatever the step time. The draws use the run's own generator, seeded from the scenario's seed.

**The closed form.** Between two checkpoints a segment of *S = n·T + (n/f)·E + δ* seconds must run without failure,
and after a failure *R + ρ + S* must. With exponential failures the expected time to complete a segment is
`e^{λ(R+ρ)} (e^{λS} − 1) / λ` (the renewal argument of Daly, "A higher order estimate of the optimum checkpoint
interval", FGCS 2006), so the expected goodput is *n* steps' tokens over it. Young's interval (Comm. ACM 17(9), 1974),
`τ ≈ √(2δM)` of work between saves with M = 1/λ, is the `save_freq` to compare the scenario's with; to first order the
share of time lost is then δ/τ + (τ/2 + R + ρ)/M.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SECONDS_PER_HOUR = 3600.0
# The goodput sampler's stream of the scenario's seed: a spawn key no simulation component uses (the simulator spawns
# its children 0, 1, 2, … from the same seed), so adding or removing the horizon never changes a simulated step.
GOODPUT_SPAWN_KEY = 0x600D
LOSS_CAUSES = ("recomputed_work", "restart", "restore", "checkpoint_save", "evaluation", "unfinished_at_horizon")


@dataclass(frozen=True)
class PoolFailures:
    pool: str
    gpus: int
    per_gpu_per_s: float  # job-stopping failures per GPU per second


@dataclass(frozen=True)
class LongRunTimes:
    """The seconds a long run pays besides its steps, all plain values (`LongRunFacts` prices them from a scenario)."""

    horizon_s: float
    pools: tuple[PoolFailures, ...]
    restart_s: float  # detection and start-up after each failure
    restore_s: float  # reading the checkpoint back
    save_freq: int | None  # steps between checkpoints; None: never saved
    save_s: float  # blocking seconds of one save
    test_freq: int | None  # steps between evaluation passes; None: none
    evaluation_s: float  # one evaluation pass

    @property
    def failures_per_s(self) -> float:
        return sum(p.gpus * p.per_gpu_per_s for p in self.pools)


def _last_index(position: float, at: Callable[[int], float], seconds_per_index: float) -> int:
    """The largest j ≥ 0 with at(j) ≤ position, for an increasing `at` with at(0) ≤ position: a bracket grown from
    the guess position / seconds_per_index (the floors in A and C keep it within a few indices of the answer, unless
    a save or an evaluation dwarfs a step), then bisection, so a lookup is O(log) whatever the inputs."""
    low = max(0, int(position // seconds_per_index))
    while low > 0 and at(low) > position:
        low //= 2
    width = 1
    while at(low + width) <= position:
        low, width = low + width, width * 2
    high = low + width  # at(low) ≤ position < at(high)
    while high - low > 1:
        middle = (low + high) // 2
        if at(middle) <= position:
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class _Timeline:
    """The failure-free progress clock of a run with step time T (module docstring)."""

    step_s: float
    times: LongRunTimes

    def _every(self, count: int, freq: int | None) -> int:
        return count // freq if freq else 0

    def step_trained_at(self, i: int) -> float:
        t = self.times
        before = max(i - 1, 0)
        return i * self.step_s + self._every(before, t.test_freq) * t.evaluation_s + self._every(before, t.save_freq) * t.save_s

    def checkpoint_at(self, k: int) -> float:
        t = self.times
        assert t.save_freq is not None
        steps = k * t.save_freq
        return steps * self.step_s + self._every(steps, t.test_freq) * t.evaluation_s + k * t.save_s

    def seconds_per_step(self) -> float:
        """Mean progress-clock seconds per step, evaluation and saves included."""
        t = self.times
        return (self.step_s + (t.evaluation_s / t.test_freq if t.test_freq else 0.0)
                + (t.save_s / t.save_freq if t.save_freq else 0.0))

    def steps_trained_by(self, position: float) -> int:
        return _last_index(position, self.step_trained_at, self.seconds_per_step())

    def last_checkpoint(self, position: float) -> float:
        """Where the progress clock rolls back to after a failure at `position`: the last complete checkpoint."""
        save_freq = self.times.save_freq
        if save_freq is None:
            return 0.0
        return self.checkpoint_at(_last_index(position, self.checkpoint_at, self.seconds_per_step() * save_freq))

    def composition(self, position: float) -> dict[str, float]:
        """How `position` seconds of progress from the start divide into trained steps, evaluation, saves and the
        step in progress, with the number of steps trained."""
        t = self.times
        steps = self.steps_trained_by(position)
        before = max(steps - 1, 0)  # the steps whose evaluation and save precede the last one's training
        evaluations, saves = self._every(before, t.test_freq), self._every(before, t.save_freq)
        rest = position - (steps * self.step_s + evaluations * t.evaluation_s + saves * t.save_s)
        # What follows the last trained step: its evaluation, then its save, then the next step's training.
        evaluation = min(rest, t.evaluation_s) if t.test_freq and steps and steps % t.test_freq == 0 else 0.0
        rest -= evaluation
        save = min(rest, t.save_s) if t.save_freq and steps and steps % t.save_freq == 0 else 0.0
        rest -= save
        return {"steps": steps, "trained": steps * self.step_s, "evaluation": evaluations * t.evaluation_s + evaluation,
                "checkpoint_save": saves * t.save_s + save, "unfinished_at_horizon": rest}


def sample_horizon(step_s: float, times: LongRunTimes, rng: np.random.Generator) -> dict:
    """One sampled history of the horizon: steps trained, failures by pool, and the seconds by cause."""
    timeline = _Timeline(step_s, times)
    rate = times.failures_per_s
    shares = np.array([p.gpus * p.per_gpu_per_s for p in times.pools]) / rate if rate else np.zeros(len(times.pools))
    wall, progress = 0.0, 0.0
    lost = {"recomputed_work": 0.0, "restart": 0.0, "restore": 0.0}
    failures = 0
    while True:
        wait = rng.exponential(1.0 / rate) if rate else math.inf
        if wall + wait >= times.horizon_s:
            progress += times.horizon_s - wall
            break
        wall += wait
        progress += wait
        failures += 1
        rolled_back = timeline.last_checkpoint(progress)
        lost["recomputed_work"] += progress - rolled_back
        progress = rolled_back
        wall, during = _recover(wall, times, rng, lost, rate)
        failures += during
        if wall >= times.horizon_s:
            break
    kept = timeline.composition(progress)
    pools = rng.multinomial(failures, shares) if failures else np.zeros(len(times.pools), dtype=np.int64)
    seconds = {**{k: kept[k] for k in ("trained", "evaluation", "checkpoint_save", "unfinished_at_horizon")}, **lost}
    return {"steps": kept["steps"], "failures": failures, "seconds": seconds,
            "failures_by_pool": {p.pool: int(n) for p, n in zip(times.pools, pools, strict=True)}}


def _recover(wall: float, times: LongRunTimes, rng: np.random.Generator, lost: dict[str, float],
             rate: float) -> tuple[float, int]:
    """Restart then restore, from the beginning whenever a failure strikes during them: the wall time they end at
    (at most the horizon) and the failures during them; their seconds are booked in `lost`."""
    recovery = times.restart_s + times.restore_s
    during = 0
    while True:
        wait = rng.exponential(1.0 / rate)
        spent = min(wait, recovery, times.horizon_s - wall)
        lost["restart"] += min(spent, times.restart_s)
        lost["restore"] += max(0.0, spent - times.restart_s)
        wall += spent
        if wait >= recovery or wall >= times.horizon_s:
            return wall, during
        during += 1


def expected_segment_s(segment_s: float, recovery_s: float, rate: float) -> float:
    """Expected wall seconds to complete `segment_s` of failure-free work between checkpoints, when failures arrive at
    `rate` and each costs `recovery_s` (itself liable to fail) plus the segment's work so far (Daly 2006)."""
    if rate == 0:
        return segment_s
    try:
        return math.exp(rate * recovery_s) * math.expm1(rate * segment_s) / rate
    except OverflowError:
        # A segment hundreds of MTBFs long: practically none completes, so the expected goodput is nil.
        return math.inf


def closed_form(step_s: float, tokens_per_step: float, gpus: int, times: LongRunTimes) -> dict:
    """The expected goodput of the renewal formula, Young's interval and the first-order waste at the scenario's."""
    rate = times.failures_per_s
    mtbf = 1.0 / rate if rate else math.inf
    work_per_step = step_s + (times.evaluation_s / times.test_freq if times.test_freq else 0.0)
    young = math.sqrt(2.0 * times.save_s * mtbf) if times.save_freq and rate else None
    result: dict = {"job_mtbf_h": mtbf / SECONDS_PER_HOUR if rate else None,
                    "young_daly_interval_s": young,
                    "young_daly_save_freq": max(1, round(young / work_per_step)) if young else None,
                    "expected_tokens_per_gpu_hour": None, "expected_fraction": None, "first_order_waste": None}
    if times.save_freq is None:
        return result
    n = times.save_freq
    segment = n * work_per_step + times.save_s
    mean = expected_segment_s(segment, times.restart_s + times.restore_s, rate)
    result.update({
        "expected_tokens_per_gpu_hour": n * tokens_per_step / mean / gpus * SECONDS_PER_HOUR,
        "expected_fraction": n * step_s / mean,
        "first_order_waste": (times.save_s / (n * work_per_step)
                              + (n * work_per_step / 2 + times.restart_s + times.restore_s) / mtbf)})
    return result


def goodput(step_s: float, tokens_per_step: float, gpus: int, times: LongRunTimes, seed: int) -> dict:
    """metrics.json's `goodput`: the sampled horizon beside its closed form (docs/metrics.md, "Goodput")."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(GOODPUT_SPAWN_KEY,)))
    sampled = sample_horizon(step_s, times, rng)
    booked = gpus * times.horizon_s
    tokens = sampled["steps"] * tokens_per_step
    seconds = sampled["seconds"]
    return {
        "tokens_per_gpu_hour": tokens / booked * SECONDS_PER_HOUR,
        "tokens_per_s": tokens / times.horizon_s,
        "fraction": seconds["trained"] / times.horizon_s,
        "steps": sampled["steps"],
        "tokens": tokens,
        "failures": sampled["failures"],
        "failures_by_pool": sampled["failures_by_pool"],
        "expected_failures": times.failures_per_s * times.horizon_s,
        "gpu_hours_lost": {cause: seconds[cause] / times.horizon_s for cause in LOSS_CAUSES},
        "horizon_s": times.horizon_s,
        "restart_s": times.restart_s,
        "restore_s": times.restore_s,
        "save_s": times.save_s,
        "save_freq": times.save_freq,
        "evaluation_s": times.evaluation_s,
        "test_freq": times.test_freq,
        "closed_form": closed_form(step_s, tokens_per_step, gpus, times),
    }
