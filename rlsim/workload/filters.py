"""Which groups are informative — their rewards differ, so DAPO's dynamic sampling keeps them.

A policy is one registered builder (`@register_filter("kind")`) returning a `Decide`: given a drawn group (its
samples and success rate) and a Generator, whether it is informative. A policy built for a run may keep state (the
trace filter's position); nothing is shared between runs.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rlsim import registry
from rlsim.config.schema import Scenario
from rlsim.config.workload import FractionFilter, Informative, SuccessRateFilter, TraceFilter, Workload
from rlsim.errors import Problem, ScenarioError
from rlsim.registry import Registry
from rlsim.traces import read_filter_indices

Decide = Callable[[int, "float | None", np.random.Generator], bool]
"""(samples in the group, the prompt's success rate or None, rng) → informative?"""
Builder = Callable[[Informative], Decide]
FILTERS: Registry[Builder] = registry.GROUP_FILTERS
register_filter = FILTERS.register


def filter_policy(config: Informative) -> Decide:
    return FILTERS[config.kind](config)


@register_filter("fraction")
def _fraction(config: FractionFilter) -> Decide:
    fraction = config.fraction

    def decide(samples, success, rng):
        # Always one draw per group, so the stream does not depend on the fraction being 0 or 1.
        return bool(rng.random() < fraction)
    return decide


@register_filter("success_rate")
def _success_rate(config: SuccessRateFilter) -> Decide:
    def decide(samples, success, rng):
        if success is None:
            raise ValueError("the success_rate filter needs workload.success_rate")
        correct = rng.binomial(samples, success)
        return bool(0 < correct < samples)
    return decide


@register_filter("trace")
def _trace(config: TraceFilter) -> Decide:
    """The recorded keep/drop decisions in order: generation batch after batch, prompt after prompt, then again."""
    decisions = [index in batch.kept for batch in read_filter_indices(Path(config.path))
                 for index in range(batch.prompts)]
    position = 0

    def decide(samples, success, rng):
        nonlocal position
        kept = decisions[position % len(decisions)]
        position += 1
        return kept
    return decide


def kept_fraction(path: Path) -> float:
    """The share of prompts a recorded filter kept: the `fraction` that reproduces it on average."""
    batches = read_filter_indices(path)
    return sum(len(b.kept) for b in batches) / sum(b.prompts for b in batches)


def expected_kept_fraction(workload: Workload, samples_per_prompt: int) -> float:
    """The share of groups the workload's filter is expected to keep: what dynamic sampling over-generates by."""
    config = workload.informative_model
    if config.kind == "fraction":
        return config.fraction
    if config.kind == "trace":
        return kept_fraction(Path(config.path))
    success = workload.success_rate
    if success is None:
        raise ValueError("the success_rate filter needs workload.success_rate")
    return mean_informative_chance(success.mean * success.concentration, (1 - success.mean) * success.concentration,
                                   samples_per_prompt)


def drawable_kept_fraction(scenario: Scenario) -> float:
    """`expected_kept_fraction` of a scenario running dynamic sampling, refused when it is so small that filling the
    run's batches would draw past `run.max_rollouts` (a success rate of 1e-9 keeps ~no group: the run would never end,
    and its draws would not fit in memory) — the size check at load time sees only informative_group_fraction."""
    algorithm = scenario.algorithm
    kept = expected_kept_fraction(scenario.workload, algorithm.samples_per_prompt)
    limit = scenario.run.max_rollouts
    needed = algorithm.prompts_per_step * algorithm.samples_per_prompt * (scenario.run.steps or 1)
    if kept <= 0 or needed > kept * limit:
        raise ScenarioError(Problem(
            f"dynamic sampling keeps {kept:.3g} of the groups, so filling {scenario.run.steps} step(s) would draw "
            f"past run.max_rollouts ({limit:,} responses)", path="workload.informative",
            valid="a filter that keeps more groups (a success rate further from 0 and 1), or no dynamic sampling"))
    return kept


def mean_informative_chance(alpha: float, beta: float, samples: int) -> float:
    """E[1 − pⁿ − (1 − p)ⁿ] for a success rate p ~ Beta(α, β): the chance a group of n samples is informative, in
    closed form — E[pⁿ] = B(α + n, β) / B(α, β) — through log-gamma, so it holds for any α, β > 0 (numerical
    integration overflows when either is tiny, e.g. a mean success rate of 1e-9)."""
    from scipy.special import gammaln

    total = alpha + beta
    all_right = math.exp(gammaln(alpha + samples) - gammaln(alpha) + gammaln(total) - gammaln(total + samples))
    all_wrong = math.exp(gammaln(beta + samples) - gammaln(beta) + gammaln(total) - gammaln(total + samples))
    return min(1.0, max(0.0, 1.0 - all_right - all_wrong))
