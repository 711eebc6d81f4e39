"""Which groups are informative — their rewards differ, so DAPO's dynamic sampling keeps them.

A policy is one registered builder (`@register_filter("kind")`) returning a `Decide`: given a drawn group (its
samples and success rate) and a Generator, whether it is informative. A policy built for a run may keep state (the
trace filter's position); nothing is shared between runs.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rlsim import registry
from rlsim.config.workload import FractionFilter, Informative, SuccessRateFilter, TraceFilter, Workload
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
    from scipy import stats

    from rlsim.workload.budgets import informative_chance

    beta = stats.beta(success.mean * success.concentration, (1 - success.mean) * success.concentration)
    return float(beta.expect(lambda p: informative_chance(p, samples_per_prompt)))
