"""Where the analytical estimate is exact, the simulation must give the same step: fixed prompt and response lengths, a
synchronous schedule. Then the estimate's replay of an engine's continuous batching is the engine's own arithmetic, and
its training stages pack the same sequences into the same micro-batches. A difference here is a bug in one of the two,
not a modelling choice (the estimate's approximations are all about length distributions)."""
from __future__ import annotations

from pathlib import Path

import pytest

import rlsim
from rlsim.config.bound import bind
from rlsim.estimate import estimate_step

QUICKSTART = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"
FIXED = {"workload.prompt_tokens": {"kind": "fixed", "tokens": 200}}
ONE_ENGINE = {"placement.mode": "disaggregated", "placement.rollout.gpus": 1, "placement.training.gpus": 4,
              "placement.rollout.gpu_memory_utilization": 0.9}


def simulated_and_estimated(changes: dict) -> tuple[dict[str, float], dict[str, float], float, float]:
    scenario = rlsim.load_scenario(QUICKSTART, {**FIXED, **changes})
    result = rlsim.simulate(scenario)
    estimate = estimate_step(bind(scenario))
    stages = {stage.name: stage.seconds for stage in estimate.stages}
    return result.metrics["stages_s"], stages, result.metrics["step_time_s"]["mean"], estimate.step_s


@pytest.mark.parametrize(("prompts", "tokens"), [(8, 1000), (32, 2000)])
def test_eight_engines_each_holding_one_sample_per_group_match_exactly(prompts, tokens):
    simulated, estimated, step, estimated_step = simulated_and_estimated(
        {"algorithm.prompts_per_step": prompts, "workload.response_tokens": {"kind": "fixed", "tokens": tokens}})
    for stage, seconds in estimated.items():
        assert simulated[stage] == pytest.approx(seconds, rel=1e-9, abs=1e-12), stage
    assert step == pytest.approx(estimated_step, rel=1e-9)


@pytest.mark.parametrize(("prompts", "tokens"), [(8, 1000), (32, 2000)])
def test_one_engine_matches_but_for_the_prompt_a_group_shares(prompts, tokens):
    """One engine holds all of a group's samples; it prefills their shared prompt once (prefix sharing), which the
    estimate leaves out: its generation is a little slower, by well under 1 %. Everything else is exact."""
    simulated, estimated, step, estimated_step = simulated_and_estimated(
        {**ONE_ENGINE, "algorithm.prompts_per_step": prompts,
         "workload.response_tokens": {"kind": "fixed", "tokens": tokens}})
    for stage, seconds in estimated.items():
        if stage != "gen":
            assert simulated[stage] == pytest.approx(seconds, rel=1e-9, abs=1e-12), stage
    assert 0 <= estimated["gen"] - simulated["gen"] <= 0.01 * simulated["gen"]
    assert step == pytest.approx(estimated_step, rel=0.01)


@pytest.mark.parametrize("rollout", [{}, ONE_ENGINE, {**ONE_ENGINE, "placement.rollout.pad_prompts": "max_prompt_tokens"}])
def test_hf_generate_engines_match_exactly(rollout):
    """Static batches (placement.rollout.engine hf) have no prefix sharing to leave out: one engine or eight, prompts
    padded to the longest or to the maximum, the estimate's replay is the simulated engine's arithmetic."""
    simulated, estimated, step, estimated_step = simulated_and_estimated(
        {"placement.rollout.engine": "hf", **rollout, "algorithm.prompts_per_step": 32,
         "workload.response_tokens": {"kind": "fixed", "tokens": 1000}})
    for stage, seconds in estimated.items():
        assert simulated[stage] == pytest.approx(seconds, rel=1e-9, abs=1e-12), stage
    assert step == pytest.approx(estimated_step, rel=1e-9)
