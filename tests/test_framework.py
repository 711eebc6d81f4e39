"""The `framework:` section: the engine's CPU-side overheads as named scenario fields, one set of defaults for all."""
from __future__ import annotations

from pathlib import Path

import pytest

import rlsim
from rlsim.config.framework import CUDA_GRAPH_MAX_TOKENS, ENGINE_STEP_CPU_S, KERNEL_GAP_S, KERNEL_LAUNCH_S, Framework
from rlsim.costs.rollout import EngineOverheads
from tests.sim_scenarios import scenario_yaml


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> rlsim.Scenario:
    path: Path = tmp_path_factory.mktemp("framework") / "small.yaml"
    path.write_text(scenario_yaml(steps=1))
    return rlsim.load_scenario(path)


def test_defaults_are_the_cited_constants(scenario):
    framework = scenario.framework
    assert framework == Framework()
    overheads = EngineOverheads.for_placement(scenario.placement.rollout, framework)
    assert scenario.placement.rollout.engine == "vllm"  # whose async scheduling is opt-in
    assert overheads == EngineOverheads(ENGINE_STEP_CPU_S, False, KERNEL_LAUNCH_S, KERNEL_GAP_S,
                                        scenario.placement.rollout.cuda_graphs, CUDA_GRAPH_MAX_TOKENS)


def test_overlap_follows_each_engine_default_unless_set(scenario):
    sglang = rlsim.with_(scenario, {"placement.rollout.engine": "sglang"})
    assert EngineOverheads.for_placement(sglang.placement.rollout, sglang.framework).overlap_scheduling
    forced = rlsim.with_(scenario, {"framework.overlap_scheduling": True})
    assert EngineOverheads.for_placement(forced.placement.rollout, forced.framework).overlap_scheduling
    vllm_gen = rlsim.simulate(scenario).metrics["stages_s"]["gen"]
    assert rlsim.simulate(sglang).metrics["stages_s"]["gen"] < vllm_gen
    assert rlsim.simulate(forced).metrics["stages_s"]["gen"] == rlsim.simulate(sglang).metrics["stages_s"]["gen"]


def test_a_blocking_engine_with_a_slower_cpu_generates_more_slowly(scenario):
    base = rlsim.simulate(scenario).metrics["stages_s"]["gen"]
    v0 = rlsim.with_(scenario, {"framework.overlap_scheduling": False, "framework.engine_step_cpu_s": 0.004})
    slower = rlsim.simulate(v0).metrics["stages_s"]["gen"]
    assert slower > 1.05 * base
    free = rlsim.with_(scenario, {"framework.engine_step_cpu_s": 0.0, "framework.kernel_gap_s": 0.0})
    assert rlsim.simulate(free).metrics["stages_s"]["gen"] <= base


def test_a_bad_overhead_names_its_field(scenario):
    with pytest.raises(rlsim.ScenarioError) as err:
        rlsim.with_(scenario, {"framework.engine_step_cpu_s": -1.0})
    assert any(p.path == "framework.engine_step_cpu_s" for p in err.value.problems)
    with pytest.raises(rlsim.ScenarioError) as err:
        rlsim.with_(scenario, {"framework.overlap_sheduling": False})
    assert "overlap_scheduling" in str(err.value)
