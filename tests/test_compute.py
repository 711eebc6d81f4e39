"""The shape-aware GEMM model of rlsim.costs.compute against public kernel measurements, plus its structural properties.

Every constant of the model is the same for every GPU, dtype and model; the measurements below check it, they were not
used to fit it (except GEMM_FILL_S, read off the smallest Azure GEMMs as its comment says).
"""
from __future__ import annotations

import math

import pytest

from rlsim.costs.compute import GEMM_FILL_S, GEMM_TILE_M, GEMM_TILE_N, GPURates
from rlsim.hardware import HardwareCatalog

HARDWARE = HardwareCatalog.load()
A100 = GPURates.from_profile(HARDWARE.gpu("a100-80gb-sxm"))
H100 = GPURates.from_profile(HARDWARE.gpu("h100-sxm"))


# ---- Vidur's profiled vLLM layer GEMMs ---------------------------------------------------------------------------
#
# microsoft/vidur at 7d47513363ec447a741ac5e47241580b47724fbf, data/profiling/compute/<gpu>/meta-llama/<model>/mlp.csv:
# median time (ms) of the four weight GEMMs of one transformer layer (columns time_stats.{attn_pre_proj,
# attn_post_proj, mlp_up_proj, mlp_down_proj}.median), for `num_tokens` rows on one of `num_tensor_parallel_workers`
# GPUs. Line numbers count the header as line 1.

# (heads, kv heads, hidden, ffn) as in the CSVs' n_head, n_kv_head, n_embd, n_expanded_embd columns
LLAMA3_8B = (32, 8, 4096, 14336)
LLAMA3_70B = (64, 8, 8192, 28672)
LLAMA2_7B = (32, 32, 4096, 11008)
LLAMA2_70B = (64, 8, 8192, 28672)

VIDUR_LAYERS = [
    # gpu, file, line, architecture, tp, tokens, (qkv, o_proj, gate_up, down) in ms
    ("a100", "a100/meta-llama/Meta-Llama-3-8B/mlp.csv", 423, LLAMA3_8B, 1, 256, (0.075, 0.053, 0.291, 0.135)),
    ("a100", "a100/meta-llama/Meta-Llama-3-8B/mlp.csv", 327, LLAMA3_8B, 1, 1024, (0.246, 0.181, 1.172, 0.576)),
    ("a100", "a100/meta-llama/Meta-Llama-3-8B/mlp.csv", 197, LLAMA3_8B, 1, 4096, (1.013, 0.625, 4.127, 2.052)),
    ("a100", "a100/meta-llama/Meta-Llama-3-8B/mlp.csv", 132, LLAMA3_8B, 1, 8192, (1.986, 1.252, 8.161, 4.152)),
    ("a100", "a100/meta-llama/Meta-Llama-3-70B/mlp.csv", 1335, LLAMA3_70B, 4, 256, (0.073, 0.062, 0.309, 0.143)),
    ("a100", "a100/meta-llama/Meta-Llama-3-70B/mlp.csv", 1109, LLAMA3_70B, 4, 4096, (0.707, 0.731, 3.952, 2.033)),
    ("h100", "h100/meta-llama/Llama-2-7b-hf/mlp.csv", 196, LLAMA2_7B, 1, 512, (0.090, 0.029, 0.134, 0.0755)),
    ("h100", "h100/meta-llama/Llama-2-7b-hf/mlp.csv", 2, LLAMA2_7B, 1, 4096, (0.584, 0.193, 0.987, 0.441)),
    ("h100", "h100/meta-llama/Llama-2-70b-hf/mlp.csv", 750, LLAMA2_70B, 4, 256, (0.033, 0.022, 0.101, 0.059)),
    ("h100", "h100/meta-llama/Llama-2-70b-hf/mlp.csv", 654, LLAMA2_70B, 4, 1024, (0.075, 0.065, 0.327, 0.221)),
    ("h100", "h100/meta-llama/Llama-2-70b-hf/mlp.csv", 524, LLAMA2_70B, 4, 4096, (0.2465, 0.199, 1.361, 0.5635)),
]
# Over all 22,944 GEMMs of those four files (every token count from 1 to 32k, tensor parallelism 1-8) the model's mean
# absolute error is 12.4% (the shape-blind curve it replaced: 19.6%); per layer at these points it is within 15%.
# The model is faster than Vidur's A100 on large problems (-11% to -16%): those kernels reach ~232 TF where the A100
# profile's best measured GEMM (stas00/ml-engineering MAMF) is 271 TF. Tolerance per layer: 20%.
VIDUR_LAYER_TOLERANCE = 0.20


# ---- Vidur's profiled vLLM decode attention ----------------------------------------------------------------------
#
# microsoft/vidur at e2d00e9 ("Copy files fromm internal fork"), data/profiling/a100/attention.csv: FlashAttention decode
# over a paged KV cache (block 16) for 64 query and 8 KV heads of 128 on one of two GPUs (n_embd 8192, TP 2), median
# time_stats.attn_decode in ms, by batch_size and kv_cache_size (cached tokens per sequence). One GPU reads
# batch × kv_cache_size × 4 KV heads × 128 × 2 (K and V) × 2 bytes.
VIDUR_DECODE_ATTENTION = [
    # batch, cached tokens, ms
    (1, 256, 0.017), (1, 2048, 0.017), (1, 4032, 0.018),
    (8, 256, 0.018), (8, 2048, 0.046), (8, 4032, 0.057),
    (32, 256, 0.022), (32, 2048, 0.108), (32, 4032, 0.192),
    (64, 256, 0.043), (64, 2048, 0.219), (64, 4032, 0.407),
    (128, 256, 0.072), (128, 2048, 0.349), (128, 4032, 0.667),
]
VIDUR_KV_BYTES_PER_TOKEN = 4 * 128 * 2 * 2


def test_decode_attention_matches_vidurs_profiled_kernel():
    """The default decode-attention cost (rlsim.costs.compute DECODE_ATTENTION_*, fitted to all 10,240 decode points of
    that file) against a spread of them: within 25 % each and 11 % on average. The plain HBM curve it replaced was 23 %
    fast in the median over the file and 43 % on average on these points, having almost no fixed cost."""
    errors = []
    for batch, cached, ms in VIDUR_DECODE_ATTENTION:
        predicted = A100.attention_memory_seconds(batch * cached * VIDUR_KV_BYTES_PER_TOKEN)
        errors.append(predicted / (ms * 1e-3) - 1)
    assert max(map(abs, errors)) < 0.25, errors
    assert sum(map(abs, errors)) / len(errors) < 0.12, errors
    plain = [A100.memory_seconds(b * c * VIDUR_KV_BYTES_PER_TOKEN) / (ms * 1e-3) - 1 for b, c, ms in VIDUR_DECODE_ATTENTION]
    assert sum(map(abs, plain)) > sum(map(abs, errors))


def layer_gemms(architecture: tuple[int, int, int, int], tp: int) -> list[tuple[int, int]]:
    """(n, k) of QKV, output, gate+up and down projections on one GPU, as vLLM/sarathi split them."""
    heads, kv_heads, hidden, ffn = architecture
    head_dim = hidden // heads
    return [
        ((heads + 2 * kv_heads) * head_dim // tp, hidden),
        (hidden, heads * head_dim // tp),
        (2 * ffn // tp, hidden),
        (hidden, ffn // tp),
    ]


@pytest.mark.parametrize(
    ("gpu", "path", "line", "architecture", "tp", "tokens", "measured_ms"),
    VIDUR_LAYERS,
    ids=[f"{row[0]}-{row[1].split('/')[2]}-tp{row[4]}-{row[5]}tok" for row in VIDUR_LAYERS],
)
def test_layer_gemms_match_vidur_profiles(gpu, path, line, architecture, tp, tokens, measured_ms):
    rates = {"a100": A100, "h100": H100}[gpu]
    predicted = sum(rates.gemm_seconds(tokens, n, k) for n, k in layer_gemms(architecture, tp))
    measured = sum(measured_ms) * 1e-3
    assert predicted == pytest.approx(measured, rel=VIDUR_LAYER_TOLERANCE), (path, line, predicted / measured - 1)


def test_a100_decode_batch_gemms_no_longer_run_near_the_best_measured_rate():
    # The shape-blind curve ran Llama-3-8B's layer at 256 tokens at 97% of the A100's best GEMM rate; Vidur measures
    # 554 µs for the four GEMMs (a100 Meta-Llama-3-8B mlp.csv line 423), 75% of that rate.
    tokens, shapes = 256, layer_gemms(LLAMA3_8B, 1)
    flops = sum(2.0 * tokens * n * k for n, k in shapes)
    seconds = sum(A100.gemm_seconds(tokens, n, k) for n, k in shapes)
    assert flops / seconds < 0.85 * A100.gemm_flops
    assert flops / seconds > 0.60 * A100.gemm_flops


# ---- Azure's cuBLASLt square-GEMM series (reference §2) ----------------------------------------------------------------
#
# Azure/AI-benchmarking-guide at 8fd0c6e1bd0f853ef8f0500a3640a7d80a2a92ef, Azure_Results/ND_H100_v5_results.md
# ("GEMM CuBLASLt", FP8, random init) and ND_A100_v4_results.md (FP16): TFLOP/s at m = n = k.
H100_FP8_SQUARES = {1024: 274.1, 2048: 1011.3, 4096: 1216.9, 8192: 1290.1, 16384: 1377.3}
A100_FP16_SQUARES = {1024: 119.4, 2048: 221.8, 4096: 228.0, 8192: 253.7, 16384: 256.5}


def achieved_tflops(rates: GPURates, size: int, dtype_bytes: float) -> float:
    return 2.0 * size**3 / rates.gemm_seconds(size, size, size, dtype_bytes) / 1e12


@pytest.mark.parametrize("size", sorted(H100_FP8_SQUARES))
def test_h100_fp8_series_with_the_profile_rates(size):
    # GPURates carries the BF16 fraction of peak (MAMF 794.5 of 989, 80%) over to FP8: 1589 TF, while H100's FP8 MAMF
    # is 1402.6 TF (70.9%; stas00/ml-engineering compute/accelerator/README.md). Large sizes therefore come out up to
    # 16% faster than measured; the small, latency-bound ones within 2%. Tolerance 20%.
    rates = GPURates.from_profile(HARDWARE.gpu("h100-sxm"), "fp8")
    assert achieved_tflops(rates, size, 1.0) == pytest.approx(H100_FP8_SQUARES[size], rel=0.20)


@pytest.mark.parametrize("size", sorted(H100_FP8_SQUARES))
def test_h100_fp8_series_with_the_fp8_asymptote(size):
    # The shape model alone, given H100's measured FP8 MAMF (1402.6 TF, stas00/ml-engineering): within 10%.
    profile = GPURates.from_profile(HARDWARE.gpu("h100-sxm"), "fp8")
    rates = GPURates(profile.name, profile.peak_flops, 1402.6e12, profile.hbm_bytes_per_s, profile.memory_bytes, 132)
    assert achieved_tflops(rates, size, 1.0) == pytest.approx(H100_FP8_SQUARES[size], rel=0.10)


@pytest.mark.parametrize("size", sorted(A100_FP16_SQUARES))
def test_a100_fp16_series(size):
    # Within 12%: 2048³ is 11% slow (2.4 waves of 128×128 tiles, rounded up to 3), 4096³ 10% fast.
    assert achieved_tflops(A100, size, 2.0) == pytest.approx(A100_FP16_SQUARES[size], rel=0.12)


# ---- structure --------------------------------------------------------------------------------------------------------


def test_large_gemms_approach_the_measured_rate_and_small_ones_pay_the_fill():
    big = 2.0 * 16384**3 / H100.gemm_seconds(16384, 16384, 16384)
    assert 0.95 * H100.gemm_flops < big <= H100.gemm_flops
    assert H100.gemm_seconds(1, 1, 1) == pytest.approx(GEMM_FILL_S + H100.memory_seconds(6.0))


def test_one_tile_past_a_full_wave_costs_a_second_wave():
    sms = A100.sm_count
    assert sms == 108
    k = 8192  # compute-bound: a 128×128×8192 tile reads 4 MB and does 268 MFLOP
    full = A100.gemm_compute_seconds(GEMM_TILE_M, GEMM_TILE_N * sms, k)
    over = A100.gemm_compute_seconds(GEMM_TILE_M, GEMM_TILE_N * (sms + 1), k)
    assert over == pytest.approx(2 * full)
    # Tile quantization: one more row than a tile costs a second row of tiles.
    assert A100.gemm_compute_seconds(GEMM_TILE_M + 1, GEMM_TILE_N * 54, k) == pytest.approx(full)
    assert A100.gemm_compute_seconds(GEMM_TILE_M + 1, GEMM_TILE_N * 55, k) == pytest.approx(2 * full)


def test_a_sub_wave_problem_splits_k_to_fill_the_gpu():
    # 27 tiles on 108 SMs: K is split four ways, so the problem takes a quarter of one full-depth tile.
    tile = 2.0 * GEMM_TILE_M * GEMM_TILE_N * 4096 / (A100.gemm_flops / 108)
    assert A100.gemm_compute_seconds(GEMM_TILE_M, GEMM_TILE_N * 27, 4096) == pytest.approx(tile / 4)


def test_a_short_problem_runs_on_a_narrow_tile():
    # One row pads to a 16-row tile, not a 128-row one: at batch 1 a weight GEMM stays memory-bound even on the H20,
    # whose HBM is fast next to its tensor cores.
    h20 = GPURates.from_profile(HARDWARE.gpu("h20"))
    n, k = 4096, 14336
    assert h20.gemm_compute_seconds(1, n, k) < h20.memory_seconds(2.0 * n * k)
    assert A100.gemm_compute_seconds(1, n, k) == pytest.approx(A100.gemm_compute_seconds(16, n, k))
    assert A100.gemm_compute_seconds(17, n, k) > A100.gemm_compute_seconds(16, n, k)


def test_without_an_sm_count_only_tile_quantization_remains():
    blind = GPURates(A100.name, A100.peak_flops, A100.gemm_flops, A100.hbm_bytes_per_s, A100.memory_bytes, None)
    tiles = math.ceil(300 / GEMM_TILE_M) * math.ceil(5000 / GEMM_TILE_N)
    expected = tiles * 2.0 * GEMM_TILE_M * GEMM_TILE_N * 4096 / A100.gemm_flops
    assert blind.gemm_compute_seconds(300, 5000, 4096) == pytest.approx(expected)
    # Wave quantization only ever adds time.
    assert A100.gemm_compute_seconds(300, 5000, 4096) >= expected


def test_every_shipped_gpu_has_an_sm_count_and_a_user_profile_may_omit_it():
    for name in HARDWARE.gpu_names():
        assert GPURates.from_profile(HARDWARE.gpu(name)).sm_count is not None, name
    without = HARDWARE.gpu("a100").model_copy(update={"sm_count": None})
    assert GPURates.from_profile(without).sm_count is None


def test_gemm_time_never_decreases_with_any_dimension():
    for gpu in ("a100-80gb-sxm", "h100-sxm", "mi300x", "h20", "b200"):
        rates = GPURates.from_profile(HARDWARE.gpu(gpu))
        previous = 0.0
        for m in (1, 2, 7, 16, 17, 64, 100, 128, 129, 256, 300, 1000, 4096, 5000, 16384):
            seconds = rates.gemm_seconds(m, 6144, 4096)
            assert seconds >= previous, (gpu, m)
            previous = seconds
        assert rates.gemm_seconds(256, 6144, 8192) > rates.gemm_seconds(256, 6144, 4096)
        assert rates.gemm_seconds(256, 12288, 4096) > rates.gemm_seconds(256, 6144, 4096)


def test_degenerate_shapes_cost_only_the_fill_and_the_traffic():
    assert A100.gemm_compute_seconds(0, 4096, 4096) == 0.0
    assert A100.gemm_seconds(0, 4096, 4096) == pytest.approx(GEMM_FILL_S + A100.memory_seconds(2.0 * 4096 * 4096))
