"""`rlsim estimate`: stage names, how stages combine, and the long-tail floor of synchronous generation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.config import load_scenario, parse_scenario
from rlsim.config.bound import bind
from rlsim.estimate import STAGES, TRAINING_STAGES, estimate_step

ROOT = Path(__file__).parents[1]


def scenario_text(gpus_per_node: int, nodes: int, response: str, tp: int = 1) -> str:
    return f"""
name: tail-{nodes}x{gpus_per_node}
cluster: {{pools: [{{gpu: h100-sxm, nodes: {nodes}}}]}}
model: Qwen2.5-1.5B
algorithm: {{name: grpo, prompts_per_step: 64, samples_per_prompt: 8, mini_batches: 2,
            max_prompt_tokens: 512, max_response_tokens: 16384}}
workload:
  prompt_tokens: {{kind: fixed, tokens: 200}}
  response_tokens: {response}
placement:
  mode: colocated
  rollout: {{gpus: {nodes * gpus_per_node}, tp: {tp}, gpu_memory_utilization: 0.6}}
"""


def estimate(text: str):
    return estimate_step(bind(parse_scenario(text)))


def test_stages_are_verl_names_and_sync_adds_them():
    result = estimate_step(bind(load_scenario(ROOT / "scenarios" / "quickstart.yaml")))
    assert [s.name for s in result.stages] == list(STAGES)
    assert result.step_s == pytest.approx(sum(s.seconds for s in result.stages))
    assert result.stage("values") == 0.0 and result.stage("update_critic") == 0.0  # GRPO has no critic
    assert result.stage("ref") > 0


def test_rollout_log_probs_skip_the_old_log_prob_pass():
    path = ROOT / "scenarios" / "quickstart.yaml"
    text = path.read_text()
    assert "  name: grpo\n" in text
    kept = estimate_step(bind(parse_scenario(text)))
    skipped = estimate_step(bind(parse_scenario(text.replace("  name: grpo\n",
                                                             "  name: grpo\n  recompute_old_log_prob: false\n"))))
    assert kept.stage("old_log_prob") > 0 == skipped.stage("old_log_prob")
    assert skipped.step_s == pytest.approx(kept.step_s - kept.stage("old_log_prob"))


def test_off_policy_overlaps_generation_with_training():
    result = estimate_step(bind(load_scenario(ROOT / "scenarios" / "qwen2.5-7b-grpo-32xh100-disaggregated.yaml")))
    produce = result.stage("gen") + result.stage("reward")
    train = sum(result.stage(name) for name in TRAINING_STAGES)
    assert result.step_s == pytest.approx(max(produce, train) + result.stage("weight_sync"))


def test_long_tail_floor_more_gpus_stop_shortening_generation():
    """With a heavy tail, generation is bound by the longest response, which extra engines cannot split: four times
    the engines shorten it by about a tenth (the longest shares its batch with fewer sequences; the simulator says
    76.5 s and 68.5 s)."""
    heavy = "{kind: lognormal, median_tokens: 1500, sigma: 1.2}"
    small, large = estimate(scenario_text(8, 1, heavy)), estimate(scenario_text(8, 4, heavy))
    assert "tail-bound" in large.stages[0].note
    assert 0.8 * small.stage("gen") < large.stage("gen") < small.stage("gen")
    # Training, by contrast, keeps scaling with data parallelism.
    assert large.stage("update_actor") < 0.5 * small.stage("update_actor")


def test_fixed_lengths_scale_with_engines_until_the_tail():
    fixed = "{kind: fixed, tokens: 1000}"
    one, two = estimate(scenario_text(4, 1, fixed)), estimate(scenario_text(8, 1, fixed))
    assert "throughput-bound" in one.stages[0].note
    assert two.stage("gen") < one.stage("gen")


def test_a_group_concurrency_cap_limits_the_decode_batch():
    """64 prompts × 8 on 8 engines: 64 sequences each. A cap of 2 groups per engine decodes 16 at a time."""
    fixed = "{kind: fixed, tokens: 1000}"
    free = estimate(scenario_text(8, 1, fixed))
    capped = estimate(scenario_text(8, 1, fixed) + "schedule: {max_concurrent_groups_per_engine: 2}\n")
    assert "concurrency 64" in free.stages[0].note
    assert "concurrency 16" in capped.stages[0].note and "at most 2 groups per engine" in capped.stages[0].note
    assert capped.stage("gen") > 2 * free.stage("gen")
    # The same cap over the whole rollout (AReaL's max_concurrent_rollouts): 16 groups over 8 engines.
    whole = estimate(scenario_text(8, 1, fixed) + "schedule: {max_concurrent_groups: 16}\n")
    assert whole.stages[0].note == capped.stages[0].note and whole.stage("gen") == capped.stage("gen")


def test_cli_table_and_json(capsys):
    path = str(ROOT / "scenarios" / "quickstart.yaml")
    assert main(["estimate", path]) == 0
    out = capsys.readouterr().out
    for name in STAGES:
        assert name in out
    assert main(["estimate", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["stages_s"]) == set(STAGES)
    assert data["step_s"] > 0 and data["throughput"]["tokens_per_s"] > 0
