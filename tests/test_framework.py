"""The `framework:` section: the engine's CPU-side overheads as named scenario fields, one set of defaults for all."""
from __future__ import annotations

from pathlib import Path

import pytest

import rlsim
from rlsim.config.bound import bind
from rlsim.config.framework import HOST_CPU_TIMES, HOST_DISPATCH_TIMES, HOST_PYTHON_TIMES, Framework
from rlsim.costs.compute import GPURates
from rlsim.costs.rollout import EngineCosts, EngineOverheads, PrefillChunk
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog
from rlsim.overheads import (
    CUDA_GRAPH_MAX_TOKENS,
    EAGER_OP_CPU_S,
    ENGINE_STEP_CPU_PER_SEQUENCE_S,
    ENGINE_STEP_CPU_S,
    KERNEL_GAP_S,
    KERNEL_LAUNCH_S,
)
from rlsim.pricing.layouts import engine_layout, engine_overheads
from tests.sim_scenarios import scenario_yaml


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> rlsim.Scenario:
    path: Path = tmp_path_factory.mktemp("framework") / "small.yaml"
    path.write_text(scenario_yaml(steps=1))
    return rlsim.load_scenario(path)


def test_defaults_are_the_cited_constants(scenario):
    framework = scenario.framework
    assert framework == Framework()
    overheads = engine_overheads(framework, engine_layout(scenario.placement.rollout))
    assert scenario.placement.rollout.engine == "vllm"  # whose async scheduling is opt-in
    assert overheads == EngineOverheads(ENGINE_STEP_CPU_S, ENGINE_STEP_CPU_PER_SEQUENCE_S, False, KERNEL_LAUNCH_S,
                                        EAGER_OP_CPU_S, KERNEL_GAP_S, scenario.placement.rollout.cuda_graphs,
                                        CUDA_GRAPH_MAX_TOKENS)
    # vllm-project/vllm#10634's 5-6 ms between decode steps at batch 256, with the fixed part from #17866.
    assert ENGINE_STEP_CPU_S + 256 * ENGINE_STEP_CPU_PER_SEQUENCE_S == pytest.approx(5.5e-3)


def test_overlap_follows_each_engine_default_unless_set(scenario):
    sglang = rlsim.with_(scenario, {"placement.rollout.engine": "sglang"})
    assert engine_overheads(sglang.framework, engine_layout(sglang.placement.rollout)).overlap_scheduling
    forced = rlsim.with_(scenario, {"framework.overlap_scheduling": True})
    assert engine_overheads(forced.framework, engine_layout(forced.placement.rollout)).overlap_scheduling
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


def test_training_passes_run_at_the_sustained_share_of_the_kernel_rates(scenario):
    """training_kernel_efficiency slows every training and log-prob kernel by its inverse and leaves generation alone."""
    no_driver = {"framework.driver_batch_bytes_per_s": None}  # a fixed cost per call, priced in tests/test_driver.py
    full = rlsim.simulate(rlsim.with_(scenario, {**no_driver, "framework.training_kernel_efficiency": 1.0})).metrics[
        "stages_s"]
    half = rlsim.simulate(rlsim.with_(scenario, {**no_driver, "framework.training_kernel_efficiency": 0.5})).metrics[
        "stages_s"]
    assert half["gen"] == full["gen"]
    for stage in ("old_log_prob", "update_actor"):
        assert 1.6 * full[stage] < half[stage] <= 2.0 * full[stage]  # communication and fixed costs do not scale
    with pytest.raises(rlsim.ScenarioError) as err:
        rlsim.with_(scenario, {"framework.training_kernel_efficiency": 1.5})
    assert any(p.path == "framework.training_kernel_efficiency" for p in err.value.problems)


def test_a_megatron_run_trains_at_megatrons_own_sustained_share(scenario):
    """The megatron backend runs at megatron_kernel_efficiency (calibrated on Megatron-Bridge), the FSDP backends at
    training_kernel_efficiency (llm-foundry): each setting moves its own backend only."""
    megatron = rlsim.with_(scenario, {"placement.training.backend": "megatron", "placement.training.zero_stage": 1})

    def update_actor(base: rlsim.Scenario, changes: dict) -> float:
        return rlsim.simulate(rlsim.with_(base, changes)).metrics["stages_s"]["update_actor"]

    at_default = update_actor(megatron, {})
    assert update_actor(megatron, {"framework.megatron_kernel_efficiency": 0.4}) > 1.5 * at_default
    assert update_actor(megatron, {"framework.training_kernel_efficiency": 0.4}) == at_default
    fsdp = update_actor(scenario, {})
    assert update_actor(scenario, {"framework.megatron_kernel_efficiency": 0.4}) == fsdp


def test_sustained_rates_scale_every_kernel_and_refuse_a_share_outside_zero_to_one():
    rates = GPURates.from_profile(HardwareCatalog.load().gpu("h100-sxm"))
    sustained = rates.sustained(0.5)
    assert sustained.peak_flops == rates.peak_flops  # MFU stays over the datasheet peak
    assert sustained.gemm_flops == rates.gemm_flops / 2 and sustained.hbm_bytes_per_s == rates.hbm_bytes_per_s / 2
    assert sustained.memory_seconds(1e9) == pytest.approx(2 * rates.memory_seconds(1e9))
    for bad in (0.0, 1.2):
        with pytest.raises(ValueError, match="in \\(0, 1\\]"):
            rates.sustained(bad)


def test_the_cpu_step_grows_with_the_sequences_an_iteration_schedules(scenario):
    costs = rlsim.with_(scenario, {"framework.overlap_scheduling": False})
    flat = rlsim.with_(costs, {"framework.engine_step_cpu_per_sequence_s": 0.0})
    busy = rlsim.simulate(costs).metrics["stages_s"]["gen"]
    assert busy > rlsim.simulate(flat).metrics["stages_s"]["gen"]
    # Priced per iteration from the batch alone: a decode step of 256 pays 256 times the per-sequence share.
    overheads = EngineOverheads(step_cpu_seconds=0.0, step_cpu_per_sequence_seconds=1e-5, overlap_scheduling=False,
                                kernel_gap_seconds=0.0)
    free = EngineOverheads(step_cpu_seconds=0.0, step_cpu_per_sequence_seconds=0.0, overlap_scheduling=False,
                           kernel_gap_seconds=0.0)
    rates = GPURates.from_profile(HardwareCatalog.load().gpu("h100-sxm"))
    spec = ModelCatalog.load().spec("Qwen2.5-7B")
    paying, not_paying = EngineCosts(spec, rates, overheads=overheads), EngineCosts(spec, rates, overheads=free)
    assert paying.decode_iteration_seconds(256, 256 * 1000) - not_paying.decode_iteration_seconds(256, 256 * 1000) \
        == pytest.approx(256 * 1e-5)
    # A mixed iteration schedules its decodes and each sequence with a prefill chunk.
    chunks = [PrefillChunk(100), PrefillChunk(50, logits=False)]
    assert paying.iteration_seconds(10, 10_000, chunks) - not_paying.iteration_seconds(10, 10_000, chunks) \
        == pytest.approx(12 * 1e-5)


def test_a_slower_host_scales_the_cpu_times_by_kind_and_nothing_else():
    framework = Framework(engine_step_cpu_s=0.002)
    assert framework.on_host(1) is framework and framework.on_host(1, 1) is framework
    grace = framework.on_host(2.75, 1.1)
    for name in Framework.model_fields:
        factor = 2.75 if name in HOST_DISPATCH_TIMES else 1.1 if name in HOST_PYTHON_TIMES else None
        expected = getattr(framework, name) * factor if factor else getattr(framework, name)
        assert getattr(grace, name) == pytest.approx(expected), name
    assert set(HOST_DISPATCH_TIMES) | set(HOST_PYTHON_TIMES) == set(HOST_CPU_TIMES)
    assert grace.engine_step_cpu_s == pytest.approx(0.0022)  # a value the user set scales as the defaults do


def test_a_grace_hosted_pool_pays_its_hosts_cpu_time(scenario, tmp_path):
    hardware = HardwareCatalog.load()
    # TransformerEngine#2053: one torch Linear forward takes 37.08 us of CPU on a GB200, 13.48 us on a DGX H100.
    assert hardware.gpu("gb200").node.dispatch_time_factor == pytest.approx(37.08 / 13.48, rel=1e-3)
    # pytorch#187862: interpreted Python on a GB200 takes 1.08-1.11x an H100 host's time.
    assert hardware.gpu("gb200").node.python_time_factor == pytest.approx(1.1)
    assert hardware.gpu("h100-sxm").node.dispatch_time_factor == hardware.gpu("h100-sxm").node.python_time_factor == 1
    gb200 = rlsim.with_(scenario, {"cluster.pools[0].gpu": "gb200", "cluster.pools[0].gpus_per_node": 4,
                                   "cluster.pools[0].nodes": 2})
    on_grace = bind(gb200).framework(gb200.placement.rollout.pool)
    assert on_grace == gb200.framework.on_host(2.75, 1.1)
    assert bind(scenario).framework(scenario.placement.rollout.pool) == scenario.framework
    # The driver's Python work is the training hosts' too: verl's adv stage, 1.1 times the x86 figure.
    adv = rlsim.simulate(gb200).metrics["stages_s"]["adv"]
    assert adv == pytest.approx(1.1 * Framework().trainer_step_overhead_s)
    # The same GPUs behind an x86 host: the engines' CPU steps are shorter, so generation is too.
    text = (Path(rlsim.hardware.shipped_profiles_dir()) / "gb200.yaml").read_text()
    x86 = [line for line in text.splitlines()
           if not line.strip().startswith(("host_cpu_time_factor", "host_python_time_factor", "aliases"))]
    (tmp_path / "gb200-x86.yaml").write_text("\n".join(x86).replace("name: gb200", "name: gb200-x86"))
    on_x86 = rlsim.with_(gb200, {"cluster.pools[0].gpu": "gb200-x86", "cluster.profile_dirs": [str(tmp_path)]})
    x86_metrics, grace_metrics = rlsim.simulate(on_x86).metrics, rlsim.simulate(gb200).metrics
    assert x86_metrics["stages_s"]["adv"] == pytest.approx(Framework().trainer_step_overhead_s)
    assert grace_metrics["stages_s"]["gen"] > 1.02 * x86_metrics["stages_s"]["gen"]
