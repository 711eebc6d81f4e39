"""Per-prompt sample budgets: how many responses each prompt of a batch gets (Knapsack RL, DUET, BroRL).

A budget policy is one registered builder (`@register_budget("kind")`) returning an `Allocate`: given the batch's
per-prompt success rates (None when the workload has none) and a Generator, the samples of each prompt.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from rlsim import registry
from rlsim.config.workload import Budget, CategoricalBudget, KnapsackBudget, UniformBudget
from rlsim.registry import Registry

Allocate = Callable[[int, "np.ndarray | None", np.random.Generator], np.ndarray]
Builder = Callable[[Budget, int], Allocate]
BUDGETS: Registry[Builder] = registry.BUDGETS
register_budget = BUDGETS.register


def budget_policy(config: Budget, samples_per_prompt: int) -> Allocate:
    """The policy a YAML budget names; `samples_per_prompt` is algorithm.samples_per_prompt."""
    return BUDGETS[config.kind](config, samples_per_prompt)


@register_budget("uniform")
def _uniform(config: UniformBudget, samples_per_prompt: int) -> Allocate:
    def allocate(count, success, rng):
        return np.full(count, samples_per_prompt, dtype=np.int64)
    return allocate


@register_budget("categorical")
def _categorical(config: CategoricalBudget, samples_per_prompt: int) -> Allocate:
    values = np.asarray(config.samples.values, dtype=np.int64)
    weights = np.ones(len(values)) if config.samples.weights is None else np.asarray(config.samples.weights, float)
    cumulative = np.cumsum(weights) / weights.sum()

    def allocate(count, success, rng):
        return values[np.minimum(np.searchsorted(cumulative, rng.random(count), side="right"), len(values) - 1)]
    return allocate


def informative_chance(success: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """P(a group of n samples at success rate p is neither all right nor all wrong) = 1 − pⁿ − (1 − p)ⁿ."""
    return 1.0 - success**samples - (1.0 - success) ** samples


@register_budget("knapsack")
def _knapsack(config: KnapsackBudget, samples_per_prompt: int) -> Allocate:
    low, high = config.min_samples, config.max_samples

    def allocate(count, success, rng):
        if success is None:
            raise ValueError("the knapsack budget needs workload.success_rate")
        samples = np.full(count, low, dtype=np.int64)
        budget = count * samples_per_prompt - samples.sum()
        # Each prompt's gain from one more sample shrinks as it gets more, so taking the best gain each time is
        # optimal; ties go to the earlier prompt, so the allocation is deterministic.
        heap = [(-_gain(float(p), low), i) for i, p in enumerate(success) if low < high]
        heapq.heapify(heap)
        while budget > 0 and heap:
            _, i = heapq.heappop(heap)
            samples[i] += 1
            budget -= 1
            if samples[i] < high:
                heapq.heappush(heap, (-_gain(float(success[i]), int(samples[i])), i))
        return samples
    return allocate


def _gain(p: float, n: int) -> float:
    """informative_chance(p, n + 1) − informative_chance(p, n), simplified."""
    return p**n * (1.0 - p) + (1.0 - p) ** n * p
