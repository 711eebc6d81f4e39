"""What became of the generated samples (rlsim.metrics.sample_use): useful gradients, samples never trained, and the
staleness bound's length bias — each checked against the sequence records it summarises, and the first against
Knapsack RL's headline."""
from __future__ import annotations

import numpy as np
import pytest

from rlsim.config.workload import KnapsackBudget
from rlsim.events import STALENESS_BOUND
from rlsim.metrics.sample_use import sample_use
from rlsim.sim.run import simulate_log
from rlsim.workload.budgets import budget_policy, informative_chance
from tests.sim_scenarios import bound

HEAVY = "{kind: lognormal, median_tokens: 600, sigma: 1.3}"
SPREAD_SUCCESS = "success_rate: {mean: 0.5, concentration: 1.0}\ninformative: {kind: success_rate}"


def useful(budget: str) -> dict:
    workload = SPREAD_SUCCESS + (f"\nsamples_per_prompt: {budget}" if budget else "")
    log = simulate_log(bound(prompts=128, samples=8, steps=4, response="{kind: fixed, tokens: 24}",
                             workload=workload)).log
    return sample_use(log)["useful_gradient"]


def expected_shares(groups: int = 200_000) -> tuple[float, float]:
    """The per-sample useful share under 8 samples a prompt and under the knapsack allocation (2-93), in expectation:
    E[1 − pⁿ − (1 − p)ⁿ] weighted by n, over p ~ Beta(0.5, 0.5), by a large draw of prompts allocated as rlsim does."""
    rng = np.random.default_rng(0)
    success = rng.beta(0.5, 0.5, groups)
    allocate = budget_policy(KnapsackBudget(kind="knapsack", min_samples=2, max_samples=93), 8)
    samples = allocate(groups, success, rng)
    uniform = float(informative_chance(success, np.full(groups, 8)).mean())
    return uniform, float((samples * informative_chance(success, samples)).sum() / samples.sum())


def test_knapsack_budgets_raise_the_share_of_samples_with_a_useful_gradient():
    """Knapsack RL (arXiv 2509.25849, GRPO, 8 rollouts a prompt against a knapsack allocation of the same total, up to
    93 for the hardest prompts): "increases the effective ratio of non-zero policy gradients by 20-40%". With success
    rates spread evenly (Beta, a + b = 1, mean 0.5) rlsim's per-sample share rises by 21 % in expectation (0.61 ->
    0.74): the allocation moves samples to the prompts whose groups can disagree. The share of *groups* rises far less
    (~6 %), since it counts a group of 2 like a group of 93; the paper's ratio counts gradients, i.e. samples. rlsim
    allocates by the true success rate, where the paper estimates it from past epochs. The simulated run (512 groups
    each way) must agree with the expectation within three standard errors of its sampling."""
    expected_uniform, expected_knapsack = expected_shares()
    expected_gain = expected_knapsack / expected_uniform - 1
    assert 0.20 <= expected_gain <= 0.40  # the paper's range, in expectation
    uniform = useful("")
    knapsack = useful("{kind: knapsack, min_samples: 2, max_samples: 93}")
    groups = uniform["groups"]
    assert groups == knapsack["groups"] == 512
    # Each group's flag is one Bernoulli draw, so a share over 512 groups has a standard error of sqrt(q(1 − q)/512);
    # the gain's relative error adds the two shares' in quadrature.
    errors = [np.sqrt(q * (1 - q) / groups) / q for q in (expected_uniform, expected_knapsack)]
    gain = knapsack["sample_share"] / uniform["sample_share"] - 1
    assert gain == pytest.approx(expected_gain, abs=3 * (1 + expected_gain) * float(np.hypot(*errors)))
    assert uniform["group_share"] == pytest.approx(expected_uniform, abs=3 * errors[0] * expected_uniform)
    assert knapsack["group_share"] > uniform["group_share"] * 0.98  # about as many groups, far more samples
    # Uniform budgets: every sample of a group shares its flag, so the two shares agree.
    assert uniform["sample_share"] == pytest.approx(uniform["group_share"])


def test_samples_a_policy_dropped_are_generated_but_never_trained():
    """Dynamic sampling over-generates and drops the groups whose rewards agree: their tokens are generated and thrown
    away, by policy, apart from what the run's end left in flight."""
    log = simulate_log(bound(prompts=16, samples=4, steps=3, dynamic_sampling=True, informative=0.5)).log
    used = sample_use(log)["never_trained"]
    records = log.sequences
    thrown = records.dropped_by_a_policy
    assert used["samples"] == int(thrown.sum()) > 0
    assert used["response_tokens"] == int(records.response_tokens[thrown].sum())
    assert used["token_share"] == pytest.approx(used["response_tokens"] / records.response_tokens.sum())
    assert sum(used["by_policy"].values()) == used["samples"] and "dynamic_sampling" in used["by_policy"]
    # Every trained group is informative under dynamic sampling: it kept only those.
    assert sample_use(log)["useful_gradient"]["group_share"] == 1.0


def test_the_staleness_bound_drops_long_responses_more_often():
    """Asynchronous, bound 1, a heavy length tail: a group completes when its longest response does, so groups with long
    responses come in late and a policy or more too old. The dropped samples are the long ones."""
    log = simulate_log(bound(gpus=8, mode="disaggregated", rollout_gpus=4, training_gpus=4, prompts=32, samples=8,
                             response=HEAVY, max_response=16384, schedule="async", staleness=1, steps=8,
                             mini_batches=2, partial="in_flight")).log
    bias = sample_use(log)["staleness_length_bias"]
    records = log.sequences
    dropped = records.dropped_by_mask(lambda name: name == STALENESS_BOUND)
    assert bias["dropped"] == int(dropped.sum()) > 0
    assert bias["drop_rate"] == pytest.approx(dropped.sum() / (dropped | records.trained).sum())
    assert bias["mean_response_tokens"]["dropped"] > 1.5 * bias["mean_response_tokens"]["trained"]
    rates = bias["drop_rate_by_length_quartile"]
    assert rates[3] > rates[0] and bias["long_minus_short_drop_rate"] == pytest.approx(rates[3] - rates[0])
    assert np.mean(rates) == pytest.approx(bias["drop_rate"], abs=0.01)


def test_a_synchronous_run_wastes_nothing_and_drops_nothing_for_staleness():
    used = sample_use(simulate_log(bound(steps=2)).log)
    assert used["never_trained"]["samples"] == 0 and used["never_trained"]["token_share"] == 0.0
    assert used["staleness_length_bias"]["dropped"] == 0
    assert used["useful_gradient"]["group_share"] == 1.0  # informative_group_fraction defaults to 1
