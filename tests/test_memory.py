"""Per-GPU memory: ZeRO model-state formulas, re-derived activations, pipeline in-flight, offload, and InfeasibleError
hints that were checked to fit."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlsim.config import load_scenario
from rlsim.config.bound import bind
from rlsim.config.schema import Scenario, TrainingPlacement
from rlsim.costs import memory as costs_memory
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memory import GIB, activation_bytes_per_token, kv_bytes_per_token_per_gpu, model_state_bytes
from rlsim.errors import InfeasibleError
from rlsim.models import ModelCatalog
from rlsim.pricing.layouts import training_layout
from rlsim.pricing.memory import (
    memory_report,
    resident_reference,
    rollout_memory,
    training_memory,
    training_state_beside_engines,
)

ROOT = Path(__file__).parents[1]
CATALOG = ModelCatalog.load()


def priced(placement: TrainingPlacement) -> TrainingLayout:
    """A training placement written as in a scenario, as the cost models take it (the pool does not matter here)."""
    return training_layout(placement.model_copy(update={"pool": placement.pool or "main"}))


def training_memory_of(spec, placement: TrainingPlacement, capacity_bytes: float, **roles) -> costs_memory.RoleMemory:
    return costs_memory.training_memory_of(spec, priced(placement), capacity_bytes, **roles)


def training_activation_memory(spec, placement: TrainingPlacement) -> costs_memory.ActivationMemory:
    return costs_memory.training_activation_memory(spec, priced(placement))


def scenario_from_quickstart(tmp_path: Path, *edits: tuple[str, str]) -> Scenario:
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return load_scenario(path)


# ---------------------------------------------------------------------------------------------------- model state


@pytest.mark.parametrize("shards", [8, 64])
def test_zero_stages_give_the_reference_formulas(shards):
    psi = 7.5e9
    expected = {0: 16 * psi, 1: 4 * psi + 12 * psi / shards, 2: 2 * psi + 14 * psi / shards, 3: 16 * psi / shards}
    for stage, total in expected.items():
        assert sum(model_state_bytes(psi, stage, shards).values()) == pytest.approx(total, rel=1e-12)


def test_megatron_keeps_fp32_gradients():
    spec = CATALOG.spec("Qwen2.5-7B")
    fsdp = TrainingPlacement(gpus=8, dp=8, zero_stage=1, backend="fsdp")
    megatron = fsdp.model_copy(update={"backend": "megatron"})
    gib = {name: training_memory_of(spec, layout, 80 * GIB).components["gradients"] for name, layout in
           (("fsdp", fsdp), ("megatron", megatron))}
    assert gib["megatron"] == pytest.approx(2 * gib["fsdp"])
    assert gib["fsdp"] == pytest.approx(2 * spec.total_params)


def test_expert_parallelism_splits_experts_and_zero_shards_them_over_the_expert_data_parallel_group():
    spec = CATALOG.spec("Qwen3-30B-A3B")
    layout = TrainingPlacement(gpus=32, tp=2, ep=8, dp=16, backend="megatron", zero_stage=1)
    experts = spec.routed_expert_params
    dense = spec.total_params - experts
    optimizer = training_memory_of(spec, layout, 80 * GIB).components["optimizer"]
    # Dense: split over tp, sharded over dp·cp = 16. Experts: split over ep = 8, sharded over tp·cp·dp/ep = 4.
    assert optimizer == pytest.approx(12 * (dense / 2 / 16 + experts / 8 / 4))


# ---------------------------------------------------------------------------------------------------- activations


def test_activation_constant_rederived_for_swiglu_and_gqa():
    spec = CATALOG.spec("Llama-3.1-70B")
    arch = spec.architecture
    h, f, heads = arch.hidden_size, arch.intermediate_size, arch.num_attention_heads
    q, kv = heads * arch.attention_head_dim, arch.num_key_value_heads * arch.attention_head_dim
    fused = activation_bytes_per_token(spec, "dense", "fused")
    assert fused == 8 * h + 2 * (q + 2 * kv) + 2 * q + 4 * heads + 6 * f
    # q = h, kv = h/8, f = 3.5h: the paper's 34·h becomes 33.5·h (plus the fp32 log-sum-exp per head).
    assert fused == pytest.approx(33.5 * h, rel=0.01)
    # The eager SwiGLU also keeps silu(gate).
    assert activation_bytes_per_token(spec, "dense", "eager") == fused + 2 * f


def test_recompute_and_parallelism_shrink_activations():
    spec = CATALOG.spec("Qwen2.5-7B")
    base = TrainingPlacement(gpus=8, dp=8, micro_batch_tokens=8192, activation_recompute="none")

    def acts(**changes):
        return training_activation_memory(spec, base.model_copy(update=changes)).activations

    # FlashAttention stores no score matrix, so selective recompute saves nothing more.
    assert acts(activation_recompute="selective") == acts()
    full = acts(activation_recompute="full")
    h, layers, tokens = spec.architecture.hidden_size, spec.architecture.num_hidden_layers, 8192
    one_layer = activation_bytes_per_token(spec, "dense", "eager") * tokens
    assert full == pytest.approx(layers * 2 * h * tokens + one_layer)
    assert acts(tp=2, dp=4, backend="megatron") == pytest.approx(
        training_activation_memory(spec, base.model_copy(update={"backend": "megatron"})).activations / 2)
    assert acts(micro_batch_tokens=4096) == pytest.approx(acts() / 2)


def test_pipeline_first_stage_holds_all_layers_of_one_micro_batch_and_more_when_interleaved():
    spec = CATALOG.spec("Llama-3.1-70B")
    one = TrainingPlacement(gpus=8, dp=8, backend="megatron", micro_batch_tokens=4096, activation_recompute="none")
    pp4 = one.model_copy(update={"pp": 4, "dp": 2})
    interleaved = pp4.model_copy(update={"virtual_pipeline_stages": 5})
    a1 = training_activation_memory(spec, one)
    a4 = training_activation_memory(spec, pp4)
    av = training_activation_memory(spec, interleaved)
    assert a4.activations == pytest.approx(a1.activations)
    assert a4.logits == 0  # the logits live on the last stage, which holds much less
    assert av.activations == pytest.approx(a1.activations * (1 + 3 / (4 * 5)))


def test_a_forward_only_pass_sets_the_peak_when_its_logits_outgrow_the_update():
    """A log-prob pass keeps no activations for a backward pass, but its logits grow with its own budget; with the
    training state offloaded while generating, it runs with the weights alone."""
    spec = CATALOG.spec("Llama-3.1-8B")
    layout = TrainingPlacement(gpus=8, dp=8, backend="megatron", zero_stage=1, micro_batch_tokens=4096,
                               activation_recompute="full")
    update = training_memory_of(spec, layout, 80 * GIB)
    narrow = training_memory_of(spec, layout.model_copy(update={"logprob_micro_batch_tokens": 2048}), 80 * GIB)
    assert narrow.components == update.components
    wide_layout = layout.model_copy(update={"logprob_micro_batch_tokens": 65536})
    wide = training_memory_of(spec, wide_layout, 80 * GIB)
    vocab = spec.architecture.vocab_size
    assert wide.components["logits"] == pytest.approx(2 * 65536 * vocab)  # bf16 logits, streamed by a fused kernel
    assert wide.total_bytes > update.total_bytes and "forward-only" in wide.notes[0]
    fp32 = training_memory_of(spec, wide_layout.model_copy(update={"logprob_kernel": "fp32_unfused"}), 80 * GIB)
    assert fp32.components["logits"] == pytest.approx(7 * wide.components["logits"])  # the fp32 copy and two results
    offloaded = training_memory_of(spec, wide_layout.model_copy(update={"offload_while_generating": True,
                                                                        "logprob_kernel": "fp32_unfused"}), 80 * GIB)
    assert set(offloaded.components) == {"weights", "activations", "logits"}
    assert offloaded.total_bytes == pytest.approx(fp32.total_bytes - fp32.components["optimizer"]
                                                  - fp32.components["gradients"])


# ---------------------------------------------------------------------------------------------------- infeasible


def _apply_hint(layout: TrainingPlacement, hint: str) -> TrainingPlacement:
    changes = {}
    for field, value in re.findall(r"placement\.training\.(\w+): (\w+)", hint):
        changes[field] = {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)
    assert changes, hint
    gpus = layout.tp * layout.pp * layout.cp * layout.dp
    degrees = changes.get("tp", layout.tp) * changes.get("pp", layout.pp) * changes.get("cp", layout.cp)
    return layout.model_copy(update={**changes, "dp": gpus // degrees})


def test_70b_on_8_gpus_without_sharding_is_infeasible_and_a_hint_really_fits(tmp_path):
    scenario = scenario_from_quickstart(tmp_path, ("model: Qwen2.5-1.5B", "model: Llama-3.1-70B"),
                                        ("zero_stage: 3", "zero_stage: 0"))
    bound = bind(scenario)
    gpu = bound.gpu("main")
    memory = training_memory(scenario, bound.model, gpu)
    assert not memory.fits
    with pytest.raises(InfeasibleError) as raised:
        memory.require()
    error = raised.value
    assert error.role == "training"
    assert error.needed_bytes > 16 * 70e9 > error.available_bytes == gpu.memory_bytes
    assert "would fit with" in str(error)
    layout = scenario.placement.training
    for hint in error.hints:
        fixed = training_memory_of(bound.model, _apply_hint(layout, hint), gpu.memory_bytes,
                                   reference=resident_reference(scenario))
        assert fixed.fits, hint
        assert f"({fixed.total_bytes / GIB:.1f} GiB)" in hint
    assert any("zero_stage: 3" in hint and "offload_optimizer: true" in hint for hint in error.hints)


def test_each_hint_fits_when_one_change_is_enough(tmp_path):
    scenario = scenario_from_quickstart(tmp_path, ("model: Qwen2.5-1.5B", "model: Qwen2.5-7B"),
                                        ("zero_stage: 3", "zero_stage: 0"))
    bound = bind(scenario)
    gpu = bound.gpu("main")
    memory = training_memory(scenario, bound.model, gpu)
    assert not memory.fits and memory.hints
    assert any(hint.startswith("placement.training.zero_stage: 3 (") for hint in memory.hints)
    for hint in memory.hints:
        assert training_memory_of(bound.model, _apply_hint(scenario.placement.training, hint), gpu.memory_bytes).fits


def test_a_log_prob_budget_too_wide_for_memory_gets_a_narrower_one_as_a_hint(tmp_path):
    scenario = scenario_from_quickstart(tmp_path, ("micro_batch_tokens: 16384",
                                                   "micro_batch_tokens: 16384\n    logprob_micro_batch_tokens: 262144"))
    bound = bind(scenario)
    memory = training_memory(scenario, bound.model, bound.gpu("main"))
    assert not memory.fits
    assert memory.hints[0].startswith("placement.training.logprob_micro_batch_tokens: ")
    assert training_memory_of(bound.model, _apply_hint(scenario.placement.training, memory.hints[0]),
                              bound.gpu("main").memory_bytes).fits


def test_rollout_hints_are_checked_too(tmp_path):
    scenario = scenario_from_quickstart(tmp_path, ("model: Qwen2.5-1.5B", "model: Qwen2.5-72B"))
    bound = bind(scenario)
    memory = rollout_memory(scenario, bound.model, bound.gpu("main"))
    assert not memory.fits
    assert memory.hints and "rollout.tp: 8" in memory.hints[0] and "offload" in memory.hints[0]


# ---------------------------------------------------------------------------------------------------- offload, KV


def test_the_longest_sequence_an_engine_must_hold_is_the_model_length(tmp_path):
    scenario = scenario_from_quickstart(tmp_path)
    algorithm = scenario.algorithm
    shorter = algorithm.max_prompt_tokens + algorithm.max_response_tokens // 2
    limited = scenario.model_copy(update={"algorithm": algorithm.model_copy(update={"max_sequence_tokens": shorter})})
    bound = bind(scenario)
    full = rollout_memory(scenario, bound.model, bound.gpu("main")).components["KV cache, one longest sequence"]
    cut = rollout_memory(limited, bound.model, bound.gpu("main")).components["KV cache, one longest sequence"]
    assert cut / full == pytest.approx(shorter / (algorithm.max_prompt_tokens + algorithm.max_response_tokens))


def test_offload_reduces_resident_and_training_memory(tmp_path):
    scenario = scenario_from_quickstart(tmp_path, ("model: Qwen2.5-1.5B", "model: Qwen2.5-7B"))
    spec = bind(scenario).model
    layout = scenario.placement.training
    # Everything in host memory: the policy's weights and optimizer state, and the reference policy.
    offloaded_layout = layout.model_copy(update={"offload_params": True, "offload_optimizer": True,
                                                 "reference_weights": "host"})
    offloaded = scenario.model_copy(update={"placement": scenario.placement.model_copy(
        update={"training": offloaded_layout})})
    assert training_state_beside_engines(scenario, spec) > 0 == training_state_beside_engines(offloaded, spec)
    before = training_memory_of(spec, layout, 80 * GIB)
    after = training_memory_of(spec, offloaded_layout, 80 * GIB)
    saved = before.components["weights"] + before.components["optimizer"]
    assert before.total_bytes - after.total_bytes == pytest.approx(saved)


def test_kv_budget_is_what_is_left_of_the_engine_share(tmp_path):
    scenario = scenario_from_quickstart(tmp_path)
    bound = bind(scenario)
    spec, gpu = bound.model, bound.gpu("main")
    rollout, training = memory_report(scenario, spec, {"main": gpu})
    others = sum(v for k, v in rollout.components.items() if not k.startswith("KV cache"))
    assert rollout.kv_cache_bytes == pytest.approx(0.6 * gpu.memory_bytes - others)
    assert training.fits and rollout.fits
    assert kv_bytes_per_token_per_gpu(spec, 1) == spec.kv_bytes_per_token
    # Qwen2.5-1.5B has 2 KV heads: TP beyond 2 replicates them.
    assert kv_bytes_per_token_per_gpu(spec, 4) == spec.kv_bytes_per_token / 2


def test_when_nothing_fits_the_hint_says_more_gpus(tmp_path):
    scenario = scenario_from_quickstart(tmp_path, ("model: Qwen2.5-1.5B", "model: Llama-3.1-405B"))
    bound = bind(scenario)
    memory = training_memory(scenario, bound.model, bound.gpu("main"))
    assert not memory.fits
    assert len(memory.hints) == 1 and memory.hints[0].startswith("more GPUs")
