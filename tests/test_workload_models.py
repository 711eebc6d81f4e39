"""Workload models as YAML selects them: every kind runs, bad parameters are ScenarioErrors at their field, and each
model does what it says (drift, budgets, filters, joint lengths, judges, hundreds of samples per prompt)."""
from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import ScenarioError
from rlsim.events import LABELS
from rlsim.metrics import gpu_label_seconds
from rlsim.sim.run import simulate_log
from rlsim.workload.batches import GroupSampler
from rlsim.workload.budgets import budget_policy, informative_chance
from rlsim.workload.filters import expected_kept_fraction
from tests.sim_scenarios import scenario_yaml

TRACES = Path(__file__).parents[1] / "traces" / "polytrace"
MULTITURN = """multiturn:
  turns: {values: [1, 2, 3], weights: [1, 2, 1]}
  tool_turn_tokens: {kind: lognormal, median_tokens: 40, sigma: 0.5}
  answer_turn_tokens: {kind: gamma, mean_tokens: 80, shape: 2.0}
  tool_latency: {kind: lognormal_mixture, components: [{weight: 3, median_s: 0.05, sigma: 0.5},
                                                      {weight: 1, median_s: 0.8, sigma: 0.3}]}
  tool_response_tokens: {kind: empirical, tokens: [200, 500, 900]}
  within_trajectory_correlation: 0.2"""

LENGTH_MODELS = {
    "fixed": "{kind: fixed, tokens: 120}",
    "lognormal": "{kind: lognormal, median_tokens: 150, sigma: 0.8, loc_tokens: -20}",
    "gamma": "{kind: gamma, mean_tokens: 150, shape: 0.9}",
    "gaussian_mixture": "{kind: gaussian_mixture, components: [{weight: 1, mean_tokens: 80, std_tokens: 20}, "
                        "{weight: 2, mean_tokens: 300, std_tokens: 60}]}",
    "lognormal_mixture": "{kind: lognormal_mixture, components: [{weight: 1, median_tokens: 60, sigma: 0.3}, "
                         "{weight: 1, median_tokens: 400, sigma: 0.6}]}",
    "empirical": "{kind: empirical, tokens: [10, 100, 1000], weights: [1, 5, 1]}",
    "trace": f"{{kind: trace, path: {TRACES / 'verl_video_qwen2.5_vl_7b'}, scale: 0.5}}",
    "drift": "{kind: drift, points: [{step: 0, model: {kind: lognormal, median_tokens: 100, sigma: 0.5}}, "
             "{step: 1, model: {kind: fixed, tokens: 300}}]}",
}


def run(**kwargs):
    return simulate_log(bind(parse_scenario(scenario_yaml(**kwargs)))).log


@pytest.mark.parametrize("kind", LENGTH_MODELS)
def test_every_length_model_runs_from_yaml(kind):
    log = run(response=LENGTH_MODELS[kind], prompt=LENGTH_MODELS[kind], steps=2, max_response=1024)
    assert len(log.steps) == 2 and all(s.samples == 8 * 4 for s in log.steps)


@pytest.mark.parametrize(("extra", "response"), [
    ("groups: {within_group_correlation: 0.6, prompt_response_correlation: 0.3}", LENGTH_MODELS["lognormal_mixture"]),
    ("samples_per_prompt: {kind: categorical, samples: {values: [2, 8], weights: [1, 1]}}", LENGTH_MODELS["gamma"]),
    ("success_rate: {mean: 0.4, concentration: 1.5, length_correlation: -0.5}\n"
     "samples_per_prompt: {kind: knapsack, min_samples: 2, max_samples: 12}\n"
     "groups: {within_group_correlation: 0.3}", LENGTH_MODELS["lognormal"]),
    (MULTITURN + "\ntool_wait: release", None),
    (f"replay: {{path: {TRACES / 'rllm_deepcoder_14b_16k'}}}", None),
])
def test_workload_features_run_and_account_for_every_gpu_second(extra, response):
    log = run(response=response, workload=extra, max_response=16000, steps=2,
              prompt=None if "replay" in extra else "{kind: fixed, tokens: 64}")
    for seconds in gpu_label_seconds(log):
        assert set(seconds) <= set(LABELS)
        assert sum(seconds.values()) == pytest.approx(log.wall_s, rel=1e-9)
    assert all(s.samples > 0 for s in log.steps)


# ------------------------------------------------------------------------------------------------ errors


BAD = [
    ("mixture sigma", dict(response="{kind: lognormal_mixture, components: [{weight: 1, median_tokens: 100, "
                                    "sigma: -1}]}"), "workload.response_tokens.components[0].sigma", "greater than 0"),
    ("empirical weights", dict(response="{kind: empirical, tokens: [1, 2], weights: [1]}"), "workload.response_tokens",
     "weights has 1"),
    ("drift order", dict(response="{kind: drift, points: [{step: 5, model: {kind: fixed, tokens: 3}}, {step: 2, "
                                  "model: {kind: fixed, tokens: 4}}]}"), "workload.response_tokens.points",
     "increase"),
    ("drift trace missing", dict(response="{kind: drift, points: [{step: 0, model: {kind: fixed, tokens: 3}}, "
                                          "{step: 2, model: {kind: trace, path: nowhere}}]}"),
     "workload.response_tokens.points[1].model.path", "no such"),
    ("lognormal loc", dict(response="{kind: lognormal, median_tokens: 100, sigma: 1.0, loc_tokens: 200}"),
     "workload.response_tokens", "must exceed loc_tokens"),
    ("knapsack without success", dict(workload="samples_per_prompt: {kind: knapsack}"), "workload.samples_per_prompt",
     "success rate"),
    ("knapsack bounds", dict(workload="samples_per_prompt: {kind: knapsack, min_samples: 9, max_samples: 4}"),
     "workload.samples_per_prompt", "exceeds max_samples"),
    ("replay and lengths", dict(workload=f"replay: {{path: {TRACES / 'rllm_deepcoder_14b_16k'}}}"), "workload",
     "replay gives"),
    ("multiturn and response", dict(workload=MULTITURN), "workload", "remove response_tokens"),
    ("joint covariance", dict(response=None, prompt=None, workload="joint_tokens: {kind: joint_gaussian_mixture, "
                              "components: [{weight: 1, mean_tokens: [10, 100], covariance: [[1, 5], [5, 1]]}]}"),
     "workload.joint_tokens.components[0]", "positive definite"),
    ("filter trace missing", dict(workload="informative: {kind: trace, path: no/such.jsonl}"),
     "workload.informative.path", "no such"),
    ("two filters", dict(informative=0.5, workload="informative: {kind: fraction, fraction: 0.3}"), "workload",
     "not both"),
    ("unknown tool wait", dict(workload="tool_wait: hodl"), "workload.tool_wait", "hold"),
    ("judge without gpus", dict(workload="reward: {kind: llm_judge, model: Qwen2.5-0.5B}"), "placement",
     "placement.reward_model"),
    ("gen batch without dynamic sampling", dict(workload="generation_batch_prompts: 96"),
     "workload.generation_batch_prompts", "dynamic_sampling"),
    ("unknown budget", dict(workload="samples_per_prompt: {kind: knapsak}"), "workload.samples_per_prompt",
     "knapsack"),
    ("turn weights", dict(response=None, workload=MULTITURN.replace("weights: [1, 2, 1]", "weights: [1, 2]")),
     "workload.multiturn.turns", "weights has 2"),
]


@pytest.mark.parametrize(("kwargs", "path", "words"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_workload_parameters_name_their_field(kwargs, path, words):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(**kwargs), file="bad.yaml")
    problem = next((p for p in caught.value.problems if p.path == path), None)
    assert problem is not None, caught.value.render()
    assert words in problem.render() and problem.file == "bad.yaml" and problem.line is not None


def test_a_corrupt_replay_trace_is_a_scenario_error_naming_file_and_line(tmp_path):
    (tmp_path / "packed_lengths_step_0.jsonl").write_text('{"input": 10, "output": [1, 2]}\n{"input": 5, "output": 7}\n')
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(response=None, prompt=None, workload=f"replay: {{path: {tmp_path}}}"))
    rendered = caught.value.render()
    assert "workload.replay.path" in rendered and "packed_lengths_step_0.jsonl:2" in rendered


# ------------------------------------------------------------------------------------------------ behaviour


def sampler_for(**kwargs) -> GroupSampler:
    scenario = parse_scenario(scenario_yaml(**kwargs))
    return GroupSampler(scenario.workload, scenario.algorithm, np.random.default_rng(0), np.random.default_rng(1))


def test_a_model_length_cuts_each_response_by_its_own_prompt():
    """NeMo-RL and vLLM stop a response when prompt + response reaches the model length, so a long prompt leaves less
    room; without max_sequence_tokens only max_response_tokens binds."""
    text = scenario_yaml(prompt="{kind: lognormal, median_tokens: 300, sigma: 0.8}",
                         response="{kind: lognormal, median_tokens: 1200, sigma: 0.4}", max_response=2048)
    capped = text.replace("max_response_tokens: 2048", "max_response_tokens: 2048, max_sequence_tokens: 1500")

    def pairs(yaml_text):
        scenario = parse_scenario(yaml_text)
        sampler = GroupSampler(scenario.workload, scenario.algorithm, np.random.default_rng(0), np.random.default_rng(1))
        groups = sampler.draw(500, 0)
        return [(g.prompt_tokens, r, t) for g in groups for r, t in zip(g.response_tokens, g.truncated, strict=True)]

    free, cut = pairs(text), pairs(capped)
    assert max(p + r for p, r, _ in free) > 1500
    assert max(p + r for p, r, _ in cut) == 1500
    assert all(t == (p + r == 1500) for p, r, t in cut if p + 2048 > 1500)
    # The same draws: only the samples past the model length change, and they stop exactly at it.
    for (p, r, _), (_, r_cut, _) in zip(free, cut, strict=True):
        assert r_cut == min(r, 1500 - p)
    assert parse_scenario(capped).algorithm.model_len == 1500 and parse_scenario(text).algorithm.model_len == 1024 + 2048


def test_a_model_length_no_longer_than_the_prompt_cap_is_an_error_at_its_line():
    text = scenario_yaml().replace("max_response_tokens: 2048",
                                   "max_response_tokens: 2048,\n            max_sequence_tokens: 1024")
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="bad.yaml")
    problem = next(p for p in caught.value.problems if p.path == "algorithm.max_sequence_tokens")
    assert "> 1024" in problem.render() and problem.file == "bad.yaml"
    assert problem.line == text[:text.index("max_sequence_tokens")].count("\n") + 1


def test_linear_drift_moves_the_median_between_keyframes():
    sampler = sampler_for(response="{kind: drift, points: [{step: 0, model: {kind: lognormal, median_tokens: 100, "
                                   "sigma: 0.5}}, {step: 10, model: {kind: lognormal, median_tokens: 300, sigma: 0.5}}]}",
                          max_response=100_000, samples=8)
    medians = {v: np.median([r for g in sampler.draw(2000, v) for r in g.response_tokens]) for v in (0, 5, 10, 20)}
    assert medians[0] == pytest.approx(100, rel=0.03)
    assert medians[5] == pytest.approx(200, rel=0.03)
    assert medians[10] == pytest.approx(300, rel=0.03) and medians[20] == pytest.approx(300, rel=0.03)
    step = sampler_for(response="{kind: drift, interpolation: step, points: [{step: 0, model: {kind: fixed, tokens: 5}},"
                                " {step: 4, model: {kind: fixed, tokens: 9}}]}")
    assert {r for g in step.draw(10, 3) for r in g.response_tokens} == {5}
    assert {r for g in step.draw(10, 4) for r in g.response_tokens} == {9}


def test_knapsack_allocation_is_the_best_split_of_the_budget():
    from rlsim.config.workload import KnapsackBudget

    allocate = budget_policy(KnapsackBudget(kind="knapsack", min_samples=1, max_samples=10), 4)
    success = np.array([0.5, 0.05, 0.97])
    samples = allocate(3, success, np.random.default_rng(0))
    assert samples.sum() == 12 and samples.min() >= 1 and samples.max() <= 10

    def value(split):
        return informative_chance(success, np.array(split)).sum()

    best = max((s for s in itertools.product(range(1, 11), repeat=3) if sum(s) == 12), key=value)
    assert value(samples) == pytest.approx(value(best))


def test_success_rate_filter_keeps_the_expected_share():
    scenario = parse_scenario(scenario_yaml(workload="success_rate: {mean: 0.3, concentration: 1.0}\n"
                                                     "informative: {kind: success_rate}", samples=8))
    sampler = GroupSampler(scenario.workload, scenario.algorithm, np.random.default_rng(0), np.random.default_rng(1))
    kept = np.mean([g.informative for g in sampler.draw(20_000, 0)])
    assert kept == pytest.approx(expected_kept_fraction(scenario.workload, 8), abs=0.01)


@pytest.mark.parametrize("mean, concentration", [(1e-9, 10.0), (0.5, 1e-6), (1 - 1e-12, 5.0), (0.3, 4.0), (0.2, 1e6)])
def test_the_kept_fraction_holds_for_extreme_success_rates(mean, concentration):
    """E[1 − pⁿ − (1 − p)ⁿ] over Beta(α, β) in closed form: it agrees with integrating the Beta density where that
    works, and stays in [0, 1] where the integral overflowed (a success rate of 1e-9 passed validation, then crashed)."""
    from scipy import stats

    from rlsim.workload.filters import mean_informative_chance

    alpha, beta = mean * concentration, (1 - mean) * concentration
    chance = mean_informative_chance(alpha, beta, 8)
    assert 0.0 <= chance <= 1.0
    if 1e-3 < alpha and 1e-3 < beta:
        assert chance == pytest.approx(stats.beta(alpha, beta).expect(lambda p: informative_chance(p, 8)), rel=1e-8)
    else:
        assert chance < 1e-4  # nearly every group all wrong (or all right)


def test_group_correlation_orders_samples_without_changing_their_distribution():
    from rlsim.workload.fitting import log_length_icc

    response = LENGTH_MODELS["lognormal_mixture"]
    icc, log_means = {}, {}
    for rho in (0.0, 0.5, 0.9):
        groups = sampler_for(response=response, samples=8, max_response=100_000,
                             workload=f"groups: {{within_group_correlation: {rho}}}").draw(3000, 0)
        lengths = np.array([g.response_tokens for g in groups])
        icc[rho], log_means[rho] = log_length_icc(lengths), np.log(lengths).mean()
    assert icc[0.0] < 0.03 and icc[0.5] > 0.4 and icc[0.9] > 0.8
    # The mixture's mean ln length, ½ ln 60 + ½ ln 400, whatever the correlation.
    for rho in icc:
        assert log_means[rho] == pytest.approx(0.5 * np.log(60) + 0.5 * np.log(400), abs=0.08)


def test_hundreds_of_samples_per_prompt_run():
    log = run(prompts=2, samples=256, response="{kind: lognormal, median_tokens: 60, sigma: 0.7}", max_response=512,
              steps=1, group_placement="together")
    trained = Counter(r.group for r in log.sequences if r.step_trained == 0)
    assert sorted(trained.values()) == [256, 256]


def test_categorical_budgets_give_groups_of_varying_size_and_train_them_whole():
    log = run(prompts=16, samples=4, steps=2, workload="samples_per_prompt: {kind: categorical, samples: "
                                                       "{values: [2, 64], weights: [3, 1]}}")
    sizes = Counter(Counter(r.group for r in log.sequences if r.step_trained >= 0).values())
    assert set(sizes) == {2, 64}
    assert all(s.samples == sum(1 for r in log.sequences if r.step_trained == s.step) for s in log.steps)


@pytest.mark.parametrize("schedule", ["sync", "one_step_off"])
def test_an_llm_judge_generates_verdicts_on_its_own_gpus(schedule):
    kwargs = dict(gpus=8, rollout_gpus=4 if schedule != "sync" else 6, training_gpus=2 if schedule != "sync" else None,
                  mode="disaggregated" if schedule != "sync" else "colocated", schedule=schedule,
                  workload="reward: {kind: llm_judge, model: Qwen2.5-0.5B, verdict_tokens: {kind: fixed, tokens: 64}}",
                  placement="reward_model: {gpus: 2}", steps=2)
    log = run(**kwargs)
    judge = [s for s in log.spans if s.label == "reward_model"]
    assert judge and {s.stage for s in judge} == {"reward"}
    assert min(s.first_gpu for s in judge) >= 6
    # The judge's engines have names of their own, so every generation unit is one block of GPUs.
    assert {s.unit for s in judge} == {"judge0", "judge1"}
    blocks: dict[str, set[tuple[int, int]]] = {}
    for span in log.spans:
        if span.unit.startswith(("engine", "judge")):
            blocks.setdefault(span.unit, set()).add((span.first_gpu, span.gpu_count))
    assert all(len(b) == 1 for b in blocks.values()), blocks
    assert {s.engine for s in log.engine_samples} == set(blocks)
    for seconds in gpu_label_seconds(log):
        assert sum(seconds.values()) == pytest.approx(log.wall_s, rel=1e-9)
    if schedule == "sync":
        assert all(s.stages["reward"] > 0 for s in log.steps)


@pytest.mark.parametrize("correlated", [False, True])
def test_a_step_length_spread_scales_each_versions_responses_together(correlated):
    """workload.step_length_sigma: every response of a policy version is multiplied by one lognormal factor of mean 1,
    so per-version mean lengths spread by about sigma while the overall mean holds; 0 leaves the draws untouched."""
    response = "{kind: lognormal, median_tokens: 300, sigma: 0.5}"
    groups = "groups: {within_group_correlation: 0.5}" if correlated else ""

    def per_version_means(sigma: float, seed: int = 7) -> np.ndarray:
        scenario = parse_scenario(scenario_yaml(response=response, max_response=1 << 15,
                                                workload=f"step_length_sigma: {sigma}\n{groups}"))
        sampler = GroupSampler(scenario.workload, scenario.algorithm, np.random.default_rng(0),
                               np.random.default_rng(1), step_scale_seed=seed)
        return np.array([np.mean([r for g in sampler.draw(200, v) for r in g.response_tokens]) for v in range(40)])

    still, spread = per_version_means(0.0), per_version_means(0.3)
    assert np.array_equal(still, per_version_means(0.0, seed=99))  # no spread: the seed of the factors is unused
    assert np.std(still) / np.mean(still) < 0.05
    assert 0.2 < np.std(spread) / np.mean(spread) < 0.4
    assert np.mean(spread) == pytest.approx(np.mean(still), rel=0.15)
    assert np.array_equal(spread, per_version_means(0.3))  # the same seed, the same factors


def test_a_step_length_spread_is_refused_for_replayed_or_multi_turn_work():
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(response=None, workload="step_length_sigma: 0.2\n" + MULTITURN))
    assert "workload.step_length_sigma" in caught.value.render()
