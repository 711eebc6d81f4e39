"""Levers teams pull to speed up generation: each pinned, in direction and rough size, to a public measurement.

The figures rlsim gives are in the assertions' messages; where they differ from the measurement, the comment says why.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import simpy

from rlsim.api import load_scenario, simulate, with_
from rlsim.cli.check import summary
from rlsim.config.bound import bind
from rlsim.config.framework import Framework
from rlsim.costs.compute import GPURates
from rlsim.costs.engine_kernels import ACTIVATION_SCALE_BYTES_PER_ELEMENT
from rlsim.costs.layout import EngineLayout, TrainingLayout
from rlsim.costs.rollout import EngineCosts, EngineOverheads, kv_cache_tokens
from rlsim.costs.speculative import Speculation
from rlsim.costs.training import TrainingCosts
from rlsim.costs.training_groups import GroupCollectives
from rlsim.errors import ScenarioError
from rlsim.models.spec import ModelSpec
from rlsim.pricing.engines import engine_costs, free_collective, policy_kv_tokens
from rlsim.pricing.layouts import engine_layout, engine_overheads
from rlsim.pricing.memory import memory_report, rollout_memory
from rlsim.pricing.precision import engine_precision
from rlsim.sim.recorder import Recorder
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from rlsim.sim.static_batch import StaticBatchEngine
from rlsim.topology import ClusterTopology
from tests.test_rollout_costs import A100, H100, engine

ROOT = Path(__file__).parent.parent
# verl's FP8-rollout study as a scenario; one step is the steady state of a synchronous colocated run.
FP8_STUDY = Path(__file__).parent.parent / "scenarios" / "qwen3-8b-dapo-fp8-rollout-8xh100.yaml"
QUICKSTART = Path(__file__).parent.parent / "scenarios" / "quickstart.yaml"


def fp8_study(**changes: object):
    return with_(load_scenario(FP8_STUDY), {"run.steps": 1, **changes})


# ---- FP8 rollout weights ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows, measured", [(1, 2.51 / 4.34), (16, 39.1 / 70.2), (64, 161 / 308)])
def test_an_fp8_layer_gemm_takes_about_half_the_bf16_time_while_memory_bound(rows, measured):
    """vLLM's FP8 (W8A8) GEMM against its BF16 one on Llama-3.1-8B's QKV shape (N=6144, K=4096) on an H100
    (vllm-project/vllm#17126: 2.51 vs 4.34 TFLOP/s at M=1, 39.1 vs 70.2 at 16, 161 vs 308 at 64): the FP8 kernel
    takes 0.52-0.58 of the BF16 time. rlsim gives ~0.64: its fixed 6 µs per GEMM (compute.GEMM_FILL_S) does not
    shrink with the weights."""
    bf16, fp8 = GPURates.from_profile(H100, "bf16"), GPURates.from_profile(H100, "fp8")
    n, k = 6144, 4096
    quantized_traffic = n * k * 1 + rows * k * (1 + ACTIVATION_SCALE_BYTES_PER_ELEMENT) + rows * n * 2
    ratio = fp8.gemm_seconds(rows, n, k, nbytes=quantized_traffic) / bf16.gemm_seconds(rows, n, k)
    assert measured - 0.05 < ratio < measured + 0.15, f"FP8/BF16 GEMM time {ratio:.3f}, measured {measured:.3f}"


def test_fp8_weights_reach_the_engine_cost_model():
    """The bug this lever fixes: `model.dtype: fp8` changed the GEMM rate but not the bytes a decode step reads."""
    bf16_engine, fp8_engine = bind(fp8_study()), bind(fp8_study(**{"model.dtype": "fp8"}))
    costs = [engine_costs(b, b.model, engine_layout(b.scenario.placement.rollout), None, free_collective)
             for b in (bf16_engine, fp8_engine)]
    spec = bf16_engine.model
    head = spec.architecture.hidden_size * spec.architecture.vocab_size / 2  # tp 2
    layers_bf16 = costs[0].weight_bytes_read(64) - 2 * head
    assert costs[1].weight_bytes_read(64) == pytest.approx(layers_bf16 / 2 + 2 * head)  # the head stays 16-bit
    seconds = [c.decode_iteration_seconds(64, 64 * 2000) for c in costs]
    assert seconds[1] < 0.95 * seconds[0]
    assert "mlp.gate_up_proj.input_quant" in costs[1].breakdown(64, 64 * 2000)
    # The engine's weights take half the memory (the embedding and head stay 16-bit), leaving more KV cache.
    memory = [rollout_memory(b.scenario, b.model, b.gpu(None)) for b in (bf16_engine, fp8_engine)]
    assert memory[1].components["weights"] < 0.6 * memory[0].components["weights"]
    assert policy_kv_tokens(fp8_engine) > policy_kv_tokens(bf16_engine)


def test_fp8_rollout_speedup_of_verls_qwen3_8b_run():
    """verl docs/advance/fp8.md: FP8 (blockwise W8A8) rollout of Qwen3-8B-Base, DAPO, 20K max response, 8 H100s:
    ~12 % faster generation (vLLM 0.10, CUDA 12.6), up to ~18 % (CUDA 12.9). The response lengths of that run are
    not published; with a lognormal of median 4,000 tokens and verl's default rollout TP 2, rlsim gives ~1.09-1.14x
    (1.26-1.32x at TP 1, where the weights are a larger share of each step)."""
    gen = {dtype: float(simulate(fp8_study(**{"model.dtype": dtype})).steps["gen"].mean()) for dtype in ("bf16", "fp8")}
    speedup = gen["bf16"] / gen["fp8"]
    assert 1.05 < speedup < 1.3, f"FP8 rollout {speedup:.3f}x faster; verl measured ~1.12-1.18x"


def test_fp8_weights_on_a_gpu_without_fp8_tensor_cores_are_weight_only():
    """vLLM runs FP8 checkpoints on Ampere as W8A16 (its FP8 Marlin kernel): narrow weights, 16-bit arithmetic. A
    compute-bound prefill is no faster; a memory-bound decode step is."""
    precision = engine_precision(A100, "fp8")
    assert precision.quantized_rates is None and precision.weight_bytes == 1 and precision.mode == "weight-only"
    assert engine_precision(H100, "fp8").quantized_rates is not None
    assert engine_precision(H100, "fp4").quantized_rates is None  # Hopper has no FP4 tensor cores
    bf16 = engine("Qwen2.5-7B", gpu=A100)
    fp8 = replace(bf16, weight_dtype_bytes=1.0)
    assert fp8.prefill_seconds(8192) == pytest.approx(bf16.prefill_seconds(8192), rel=0.05)
    assert fp8.decode_iteration_seconds(16, 16 * 1000) < 0.7 * bf16.decode_iteration_seconds(16, 16 * 1000)


# ---- FP8 KV cache ----------------------------------------------------------------------------------------------

def test_fp8_kv_cache_decode_cost_per_context_token_against_vllms_measurement():
    """vLLM blog, 2026-04-22 "FP8 KV cache" (v0.19.1, one H100, FlashAttention 3, Llama-3.1-8B, batch 1): the decode
    step costs 6.44 ms + 4.37e-5 ms per context token in BF16, and the per-token slope falls to 54 % of it with an
    FP8 cache (6.58 ms + 2.37e-5 ms). rlsim: 6.5 ms + 4.6e-5 ms/token, slope ratio 0.50 (it reads exactly half the
    bytes; the measured kernel also pays the dequantization)."""
    bf16, fp8 = engine("Llama-3.1-8B"), engine("Llama-3.1-8B", kv_dtype_bytes=1)

    def slope(costs):
        return (costs.decode_iteration_seconds(1, 100_000) - costs.decode_iteration_seconds(1, 20_000)) / 80_000

    assert bf16.decode_iteration_seconds(1, 256) == pytest.approx(6.44e-3, rel=0.1)
    assert slope(bf16) == pytest.approx(4.37e-8, rel=0.15)
    assert slope(fp8) / slope(bf16) == pytest.approx(0.54, abs=0.06)


def test_fp8_kv_cache_holds_twice_the_tokens():
    """Halving each cached token's bytes doubles the tokens the same memory holds (vLLM's "halves the memory per
    cached token")."""
    tokens = [policy_kv_tokens(bind(fp8_study(**{"placement.rollout.kv_cache_dtype": kv}))) for kv in ("auto", "fp8")]
    assert tokens[1] == pytest.approx(2 * tokens[0], abs=2)


def test_fp8_kv_cache_speeds_up_long_generation():
    """Long responses fill the KV cache: twice the tokens let more sequences decode at once and each step reads half
    the KV. FP8-RL (arXiv 2601.18150) reports up to 44 % more rollout throughput from FP8 weights and KV together."""
    gen = {kv: float(simulate(fp8_study(**{"placement.rollout.kv_cache_dtype": kv})).steps["gen"].mean())
           for kv in ("auto", "fp8")}
    assert 1.1 < gen["auto"] / gen["fp8"] < 2.0, gen


# ---- speculative decoding ----------------------------------------------------------------------------------------

def speculating(costs, drafted: int, acceptance_rate: float, draft=None):
    return replace(costs, speculation=Speculation(drafted, acceptance_rate, draft))


def test_tokens_per_verify_step_follow_leviathan_et_al():
    """E = (1 − α^(k+1)) / (1 − α) (arXiv 2211.17192, eq. 1): α = 0.8, k = 4 gives 3.36 tokens a step."""
    assert Speculation(4, 0.8, None).tokens_per_step == pytest.approx(3.3616)
    assert Speculation(3, 0.0, None).tokens_per_step == 1.0


def test_a_memory_bound_verify_step_gains_nearly_the_accepted_tokens():
    """Leviathan et al.'s improvement factor E / (k·c + 1) with free drafts (c = 0, n-gram lookups): a one-sequence
    decode step reads the same weights and cache to verify 4 tokens as to decode 1, so the speed-up is ~E."""
    plain = engine("Llama-3.1-8B")
    fast = speculating(plain, 3, 0.7)
    gain = plain.decode_iteration_seconds(1, 1000) / fast.decode_iteration_seconds(1, 1000)
    assert gain == pytest.approx(fast.speculation.tokens_per_step, rel=0.05)


def test_speculation_slows_a_large_compute_bound_batch():
    """vLLM's blog (2024-10-17, "How Speculative Decoding Boosts vLLM Performance by up to 2.8x"): up to 1.5x with a
    draft model and 2.8x with n-gram drafts at low load, but 1.4-1.8x slower at high load, where the verify pass's
    k + 1 tokens a sequence make the step compute-bound. rlsim, Llama-3.1-8B with Llama-3.2-1B drafting 3 tokens at
    α = 0.5 on an H100: ~1.08x at batch 1, ~0.48x at batch 256 of short sequences."""
    plain = engine("Llama-3.1-8B")
    drafted = speculating(plain, 3, 0.5, engine("Llama-3.2-1B"))
    low = plain.decode_iteration_seconds(1, 1000) / drafted.decode_iteration_seconds(1, 1000)
    high = plain.decode_iteration_seconds(256, 256 * 300) / drafted.decode_iteration_seconds(256, 256 * 300)
    assert low > 1.0 and 1 / 1.8 / 1.3 < high < 1 / 1.2, (low, high)


def test_speculative_rollout_in_a_scenario():
    """n-gram drafts (history-based, as RhymeRL's HistoSpec) speed up a long-response rollout; a draft model takes
    memory for its weights and its share of the KV cache; fast and exact simulation agree."""
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}
    plain, speculative = fp8_study(), fp8_study(**{"placement.rollout.speculative": ngram})
    gen = [float(simulate(s).steps["gen"].mean()) for s in (plain, speculative)]
    assert gen[1] < 0.8 * gen[0]
    exact = simulate(speculative, mode="exact")
    assert exact.log.steps[-1].stages["gen"] == pytest.approx(simulate(speculative).log.steps[-1].stages["gen"], rel=1e-6)
    draft = fp8_study(**{"placement.rollout.speculative": {**ngram, "method": "draft_model", "draft_model": "Qwen3-0.6B"}})
    memory = rollout_memory(draft, bind(draft).model, H100)
    assert {"draft model weights", "draft model KV cache"} <= set(memory.components)
    assert policy_kv_tokens(bind(draft)) < policy_kv_tokens(bind(plain))


# ---- MoE expert load imbalance -----------------------------------------------------------------------------------

def test_expert_load_imbalance_sets_the_busiest_expert_group_against_sglangs_eplb_ablation():
    """TensorRT-LLM measured the busiest EP rank at ~2.56x the mean for DeepSeek-R1 (EP32) and ~1.11x with EPLB
    (docs/source/blogs/tech_blog/blog4, Table 1); SGLang's EPLB ablation on DeepSeek-V3 (LMSYS blog 2025-05-05,
    large-scale EP) gave 1.49x faster prefill and 2.54x faster decode. rlsim, a DeepSeek-V3 engine over 8 H100s with
    experts over 8 groups, between those two imbalances: ~1.55x prefill, but only ~1.01-1.06x decode — its engines
    split attention over TP (the MLA cache on every GPU), so attention, not the experts, sets a decode step; SGLang's
    run used data-parallel attention, where the expert GEMMs are most of the step."""
    even = engine("DeepSeek-V3", tp=8, ep=8)
    hot, balanced = (replace(even, expert_load_imbalance=x) for x in (2.56, 1.11))
    prefill = hot.prefill_seconds(4096, 0, 4) / balanced.prefill_seconds(4096, 0, 4)
    assert prefill == pytest.approx(1.49, rel=0.2)
    decode = [hot.decode_iteration_seconds(b, b * 2000) / balanced.decode_iteration_seconds(b, b * 2000)
              for b in (64, 1024)]
    assert 1.0 < decode[0] <= decode[1] < 1.2
    assert even.decode_iteration_seconds(64, 64 * 2000) < balanced.decode_iteration_seconds(64, 64 * 2000)
    # Without expert parallelism every GPU holds a slice of every expert: no group to wait for.
    dense_split = engine("Qwen3-30B-A3B", tp=4)
    assert replace(dense_split, expert_load_imbalance=3.0).prefill_seconds(4096) == dense_split.prefill_seconds(4096)


# ---- FP8 training --------------------------------------------------------------------------------------------

NEMO_FP8_STUDY = Path(__file__).parent.parent / "scenarios" / "llama3.1-8b-grpo-megatron-fp8-8xh100.yaml"


def test_fp8_rollout_and_training_step_time_of_nemo_rls_llama_8b_run():
    """NeMo-RL docs/fp8.md: FP8 generation and FP8 (Transformer Engine) training of Llama-3.1-8B-Instruct GRPO on 8
    H100s take 15-25 % off the step time. rlsim: ~24 % with the stand-in lengths (median 300 tokens), 31-36 % with
    longer ones: generation at TP 1 gains 1.3-1.7x, more than the 10-20 % FP8-RL (arXiv 2601.18150) measured for
    W8A8 on 8B dense models, where vLLM's blockwise kernels are slower at small batches than rlsim's roofline."""
    base = with_(load_scenario(NEMO_FP8_STUDY), {"run.steps": 1})
    both = with_(base, {"model.dtype": "fp8", "placement.training.precision": "fp8"})
    steps = [simulate(s).log.steps[-1] for s in (base, both)]
    cut = 1 - (steps[1].end - steps[1].start) / (steps[0].end - steps[0].start)
    assert 0.12 < cut < 0.32, f"step time {cut:.1%} shorter; NeMo-RL measured 15-25 %"
    # Training alone: the layer GEMMs at the FP8 rate (70 % of the FP8 peak on an H100, Azure's cuBLASLt
    # measurement), with the casts that feed them; attention and the output head stay 16-bit.
    update = [s.stages["update_actor"] for s in steps]
    assert 1.2 < update[0] / update[1] < 1.6


def test_fp8_training_is_refused_where_it_cannot_run():
    for changes, words in (({"placement.training.backend": "fsdp"}, "Transformer Engine"),
                           ({"cluster.pools[0].gpu": "a100-80gb-sxm"}, "no FP8 tensor cores")):
        with pytest.raises(ScenarioError, match=words):
            with_(load_scenario(NEMO_FP8_STUDY), {"placement.training.precision": "fp8", **changes})


def test_fp8_training_keeps_transformer_engines_weight_copies():
    """Transformer Engine keeps an FP8 copy of each weight and its transpose beside the 16-bit weights (LMSYS
    "Unified FP8", 2025-11-19): FP8 training does not shrink the training state."""
    scenarios = [with_(load_scenario(NEMO_FP8_STUDY), {"placement.training.precision": p}) for p in ("bf16", "fp8")]
    training = [memory_report(s, bind(s).model, {"main": H100})[1] for s in scenarios]
    assert "FP8 weight copies" in training[1].components
    assert training[1].total_bytes > training[0].total_bytes


# ---- LoRA ------------------------------------------------------------------------------------------------------

def nemo_study(**changes: object):
    return with_(load_scenario(NEMO_FP8_STUDY), {"run.steps": 1, **changes})


def test_lora_training_does_about_two_thirds_of_the_gemm_work():
    """'LoRA Without Regret' (Thinking Machines, 2025): a LoRA step costs ~2/3 of full fine-tuning's FLOPs — the
    backward pass still computes input gradients through the frozen weights but no weight gradients. rlsim's layer
    GEMMs (forward + backward, Llama-3.1-8B, 8,192 tokens, rank 16) take ~0.78 of full training's time: the base
    GEMMs drop to 2/3, and each small adapter GEMM streams a whole activation tensor (memory-bound at rank 16)."""
    spec = bind(nemo_study()).model
    rates = GPURates.from_profile(H100)

    def gemm_seconds(rank: int) -> float:
        layers = TrainingCosts(spec, rates, TrainingLayout(lora_rank=rank), GroupCollectives())._layers
        return sum(layers.layer("dense", 8192, 8192 * 1024, backward=b).gemm for b in (False, True))

    assert 2 / 3 - 0.02 < gemm_seconds(16) / gemm_seconds(0) < 0.85


def test_lora_step_against_nemos_lora_throughput():
    """NeMo 24.07's performance summary (DGX-H100, SQuAD packed to 4,096 tokens): LoRA trains 39-47 % more tokens per
    GPU per second than full fine-tuning (Llama-2 7B/13B/70B). rlsim's actor update with rank 16 and no recompute:
    ~0.83 of full training's time (1.2x): attention, elementwise work, logits and the pipeline do not shrink, and
    NeMo's LoRA runs also use fewer GPUs with less communication."""
    base = nemo_study(**{"placement.training.activation_recompute": "none", "placement.training.micro_batch_tokens": 4096})
    update = [simulate(with_(base, {"placement.training.lora_rank": r})).log.steps[-1].stages["update_actor"]
              for r in (0, 16)]
    assert 0.6 < update[1] / update[0] < 0.9, update


def test_lora_trains_and_syncs_the_adapters_alone():
    """Adapters have gradients and optimizer state, the frozen weights none; the reference is the base with the
    adapters off; only adapters move to the engines (verl's add_lora path)."""
    full, lora = (with_(load_scenario(ROOT / "scenarios" / "qwen2.5-7b-grpo-32xh100-disaggregated.yaml"),
                        {"placement.training.lora_rank": r, "run.steps": 3}) for r in (0, 32))
    memory = [memory_report(s, bind(s).model, {pool.name: H100 for pool in s.cluster.pools})[1] for s in (full, lora)]
    assert memory[1].components["optimizer"] < 0.02 * memory[0].components["optimizer"]
    assert memory[1].components.get("reference weights", 0.0) == 0.0 < memory[0].components["reference weights"]
    sync = [simulate(s).log.steps[-1].stages["weight_sync"] for s in (full, lora)]
    assert sync[1] < 0.1 * sync[0]


def test_an_engine_serving_an_unmerged_adapter_is_slower():
    """vLLM serving a rank-8 adapter (vllm-project/vllm#11267: Llama-2-7B on an A100, ShareGPT): 2,694 -> 1,788 output
    tokens/s, 34 % less. rlsim prices the adapters' shrink and expand GEMMs at its roofline: ~7-11 % less. vLLM's
    punica kernels of that version ran per slice and well below roofline, which rlsim does not model."""
    base = engine("Llama-3.1-8B", gpu=A100)
    lora = replace(base, lora_rank=8)
    ratio = lora.offline_output_throughput(64, 220, 200, 8192) / base.offline_output_throughput(64, 220, 200, 8192)
    assert 0.6 < ratio < 0.97
# ---- HF generate() as the rollout engine -------------------------------------------------------------------------

# LLaMA's shapes (huggyllama/llama-7b and llama-13b config.json): multi-head attention, a 32,000-token vocabulary.
LLAMA = {"LLaMA-7B": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                          intermediate_size=11008, vocab_size=32000),
         "LLaMA-13B": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=40,
                           intermediate_size=13824, vocab_size=32000)}


def sharegpt_like_requests(count: int = 1000, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt, output) lengths shaped like vLLM's ShareGPT sample: lognormal with the means the vLLM paper reports
    (arXiv 2309.06180, Fig. 11: 161 input, 338 output tokens), filtered as vLLM's throughput benchmark filtered them
    (fewer than 4 tokens, a prompt over 1,024 or a pair over 2,048 dropped)."""
    rng = np.random.default_rng(seed)
    requests: list[tuple[int, int]] = []
    while len(requests) < count:
        prompt, output = (int(rng.lognormal(np.log(mean) - 0.5, 1.0)) for mean in (161, 338))
        if 4 <= prompt <= 1024 and output >= 4 and prompt + output <= 2048:
            requests.append((prompt, output))
    return requests


def offline_requests_per_second(engine_kind: str, model: str, memory_gib: float) -> float:
    """One engine on an A100's rates with `memory_gib` of HBM (90 % for the engine) serving the ShareGPT-like
    requests offline: vLLM as it ran in June 2023 (no CUDA graphs yet, 256 sequences, 2,560 batched tokens), or HF
    generate() with as many rows (up to 256) as its KV budget holds at the longest prompt plus 1,024 new tokens."""
    spec = ModelSpec.from_architecture(model, LLAMA[model])
    layout = EngineLayout(gpu_memory_utilization=0.9, engine=engine_kind, cuda_graphs=False)
    costs = EngineCosts(spec, GPURates.from_profile(A100), overheads=engine_overheads(Framework(), layout))
    kv = kv_cache_tokens(spec, memory_gib * 2**30, layout)
    env = simpy.Environment()
    recorder = Recorder(1)
    if engine_kind == "hf":
        engine = StaticBatchEngine(env, 0, costs, kv, 256, 1024, 0, 1, recorder, lambda r: None)
    else:
        engine = RolloutEngine(env, 0, costs, kv, 256, 2560, 0, 1, recorder, lambda r: None)
    rollouts = [Rollout(i, i, prompt, output, False, 0.0) for i, (prompt, output) in enumerate(sharegpt_like_requests())]
    for rollout in rollouts:
        engine.submit(rollout)
    env.run()
    return len(rollouts) / max(r.finished for r in rollouts)


@pytest.mark.parametrize("model, memory_gib", [("LLaMA-13B", 40), ("LLaMA-7B", 24)])
def test_vllm_against_hf_generate_on_sharegpt_lengths_against_vllms_launch_blog(model, memory_gib):
    """vLLM's launch blog (vllm-project.github.io _posts/2023-06-20-vllm.md): 14x-24x the throughput of HF
    Transformers for one completion per request, LLaMA-13B on an A100-40GB and LLaMA-7B on an A10G, ShareGPT lengths.
    rlsim: ~13.7x for LLaMA-13B with 40 GB, ~17.9x for LLaMA-7B with 24 GB. Where it differs: rlsim has no A10G
    profile, so the 7B case runs at an A100's rates with an A10G's 24 GB (the memory is what limits HF's batch); the
    lengths are a lognormal stand-in for the ShareGPT sample; the blog does not give HF's batch size, and rlsim sizes
    it by the KV budget at 1,024 new tokens a row (HF's contiguous cache must hold the longest prompt plus every new
    token for every row: ~10 rows for 13B), where the blog's harness knew each batch's longest output in advance."""
    ratio = offline_requests_per_second("vllm", model, memory_gib) / offline_requests_per_second("hf", model,
                                                                                                  memory_gib)
    assert 10 < ratio < 30, f"vLLM {ratio:.1f}x HF generate(); the blog measured 14x-24x"


def test_hf_generate_decode_steps_launch_every_op_and_reread_the_padded_cache():
    """HF generate() runs eagerly (~48 kernels a LLaMA layer against vLLM-eager's 11, each launched from Python),
    cannot overlap its CPU with the GPU (a device sync every step), and per step reads each row's cache three times
    (torch.cat's copy in and out, then attention); with grouped-query attention repeat_kv copies K and V out to every
    query head first (Llama-3.1-8B: 11 passes)."""
    spec = ModelSpec.from_architecture("LLaMA-7B", LLAMA["LLaMA-7B"])
    rates = GPURates.from_profile(A100)
    hf, eager = (EngineCosts(spec, rates, overheads=EngineOverheads(engine=kind, cuda_graphs=False))
                 for kind in ("hf", "vllm"))

    def slope(costs):
        return (costs.decode_iteration_seconds(32, 32 * 2000) - costs.decode_iteration_seconds(32, 32 * 1000)) / 32_000

    assert slope(hf) == pytest.approx(3 * slope(eager), rel=0.05)
    assert hf.decode_iteration_seconds(1, 500) > 2.5 * eager.decode_iteration_seconds(1, 500)
    assert hf._kernels.decode_kv_passes == 3
    gqa = engine("Llama-3.1-8B", overheads=EngineOverheads(engine="hf"))
    assert gqa._kernels.decode_kv_passes == 11
    assert not gqa.overheads.replays_graph(1)  # eager whatever cuda_graphs says


def test_hf_generate_in_a_scenario():
    """The quickstart's GRPO step with HF generate() engines: generation is several times slower than vLLM's,
    fast and exact simulation agree, and `rlsim check` names the engine and its static batches."""
    quickstart = with_(load_scenario(QUICKSTART), {"run.steps": 1})
    hf = with_(quickstart, {"placement.rollout.engine": "hf"})
    gen = [float(simulate(s).steps["gen"].mean()) for s in (quickstart, hf)]
    assert gen[1] > 3 * gen[0], gen
    exact = simulate(hf, mode="exact")
    assert exact.log.steps[-1].stages["gen"] == pytest.approx(simulate(hf).log.steps[-1].stages["gen"], rel=1e-9)
    bound = bind(hf)
    text = summary(bound, memory_report(hf, bound.model, {"main": bound.gpu(None)}), source="quickstart")
    assert "hf engines" in text and "static batches" in text and "no CUDA graphs" in text


@pytest.mark.parametrize("changes, field", [
    ({"placement.rollout.speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}},
     "placement.rollout.speculative"),
    ({"placement.rollout.kv_cache_dtype": "fp8"}, "placement.rollout.kv_cache_dtype"),
    ({"model.dtype": "fp8"}, "model.dtype"),
    ({"schedule.partial_rollout": {"mode": "april", "over_provision": 2.0}}, "schedule.partial_rollout.mode"),
    ({"model": "Qwen3-30B-A3B"}, "placement.rollout.engine"),
    ({"placement.rollout.engine": "vllm", "placement.rollout.pad_prompts": "max_prompt_tokens"},
     "placement.rollout.pad_prompts"),
])
def test_what_hf_generate_does_not_run_is_refused_at_its_field(changes, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        with_(load_scenario(QUICKSTART), {"placement.rollout.engine": "hf", **changes})


def test_nvfp4_weights_on_blackwell_against_fp8():
    """SemiAnalysis InferenceX (B200, Llama-3.3-70B, the same GPU and model): NVFP4 weights serve 13 % (at high
    per-user speeds) to 35 % (at 76 tokens/s per user) more tokens per GPU than FP8. rlsim, a TP4 engine on B200s:
    5-11 % faster decode steps — the weights are a smaller share of rlsim's step, whose per-layer all-reduce latency
    and between-step CPU time the TensorRT-LLM runs measured there hide (fused all-reduce, overlapped scheduling).
    On Hopper, which has no FP4 tensor cores, FP4 weights are weight-only (Marlin)."""
    scenario = with_(load_scenario(FP8_STUDY), {"cluster.pools[0].gpu": "b200", "model": "Llama-3.3-70B-Instruct",
                                                "placement.rollout.tp": 4, "placement.rollout.gpus": 8,
                                                "placement.training.offload_optimizer": True, "run.steps": 1})
    steps = {}
    for dtype in ("fp8", "fp4"):
        bound = bind(with_(scenario, {"model.dtype": dtype}))
        topology = ClusterTopology.build(bound)
        engine_gpus = list(topology.gpus(topology.pools[0]))[:4]
        costs = engine_costs(bound, bound.model, engine_layout(bound.scenario.placement.rollout),
                             topology.group(engine_gpus))
        steps[dtype] = [costs.decode_iteration_seconds(n, n * 3000) for n in (8, 64, 256)]
        assert engine_precision(bound.gpu(None), dtype).mode == "weights and activations"
    speedups = [fp8 / fp4 for fp8, fp4 in zip(steps["fp8"], steps["fp4"], strict=True)]
    assert all(1.03 < s < 1.4 for s in speedups), speedups
    assert speedups[0] >= speedups[-1]  # the weights weigh most in a small batch's step
