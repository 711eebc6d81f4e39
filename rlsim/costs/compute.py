"""Roofline time of GPU kernels, with shape-aware GEMMs.

A kernel takes the longer of its compute time and its memory time. Neither rate is a constant fraction of peak.

GEMMs (`gemm_seconds`, for any shape). cuBLAS and CUTLASS split the (m×n) output into tiles, one thread block each,
and run as many blocks at once as the GPU has SMs (one 128×128 block per SM); NVIDIA's "Matrix Multiplication
Background User's Guide" (docs.nvidia.com/deeplearning/performance, ch. 3) names the two losses that follow:

* tile quantization: a partial tile at the edge of m or n costs a whole tile;
* wave quantization: tiles run in waves of `sm_count`; a last, partial wave costs a whole one
  (also stas00/ml-engineering training/performance/README.md, "Do more SMs give more TFLOPS?").

A problem too small to fill one wave has its K dimension split over several blocks (CUTLASS media/docs/
efficient_gemm.md, "Parallelized Reductions: Split K"), and a short problem (m below one tile) runs on a narrower
tile, down to the 16 rows of a tensor-core MMA. Each block computes at the GPU's measured large-GEMM rate divided by
its SM count, so a problem that fills whole waves runs at that rate. The fixed fill cost (launch, pipeline prologue,
epilogue and tail) applies whichever of compute and memory binds:

    t = GEMM_FILL_S + max(waves · 2·tile_m·tile_n·(k/split) / (gemm_flops / sm_count),
                          (bytes + MEMORY_HALF_BYTES) / hbm_bytes_per_s)

with hbm_bytes_per_s the measured stream rate.

Shape-blind kernels (`compute_seconds`, `kernel_seconds`: fused or irregular work whose shape the caller does not
give) keep the plain curve t = GEMM_FILL_S + flops / gemm_flops, and memory-bound kernels
t = (bytes + MEMORY_HALF_BYTES) / hbm_bytes_per_s. Both forms are eff(x) = e_max·x/(x + x_half) curves, as the
reference recommends.

gemm_flops and hbm_bytes_per_s come from each GPU profile's public measurements (best large BF16 GEMM, HBM stream) and
sm_count from its datasheet. The constants below are the same for every GPU, dtype and model. A profile with a
`calibration:` block (written by `rlsim calibrate fit`, docs/calibration.md) replaces them with its fitted curves:
the GEMM curve of the dtype sets gemm_flops (a dtype without a curve keeps the measured-BF16 rate), the HBM curve sets
hbm_bytes_per_s and the half-efficiency size, the prefill-attention curve the attention rate, and the decode-attention
curve the rate at which fused attention reads the KV cache (without one: DECODE_ATTENTION_FIXED_S plus the KV bytes at
DECODE_ATTENTION_STREAM_FRACTION of the stream rate, measured on vLLM's decode kernel). GEMM_FILL_S stays
the same for every GPU: the rollout engine's closed-form decode prices it as this constant, and its exact mode must
agree, so the fit holds the fill at GEMM_FILL_S and fits the rate.

Checked, not tuned, against public measurements (tests/test_compute.py): Vidur's profiled vLLM layer GEMMs
(microsoft/vidur data/profiling/compute/{a100,h100}/meta-llama/*/mlp.csv: QKV, output, up and down projections of
Llama-3-8B/70B on A100 and Llama-2-7B/70B on H100, tensor parallelism 1-8, 1 to 32k tokens): mean absolute error
12% (the plain curve: 20%); the model is faster than those kernels by ~10% in the median, mostly because Vidur's A100
reaches ~232 TF on these shapes where the profile's best measured GEMM is 271 TF.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from rlsim.hardware import GPUCalibration, GPUProfile

# FLOPs, bytes and times as one number, or as a numpy array of them priced element by element: a cost model prices a
# whole range of token counts at once so (`GPURates.gemm_seconds`).
Amount = TypeVar("Amount", float, NDArray[np.float64])

Tokens = Any
"""Token counts as one number, or as a numpy array of them: the cost models' kernels and layers are built and priced by
the same arithmetic for both, so a price over an array holds, element by element, the price of each count to the bit
(`EngineCosts` tabulates an engine's layers so, `TrainingCosts` the micro-batches of a pass)."""


def each(function: Callable[[float], float], values: Tokens) -> Tokens:
    """`function` of a number, or of every element of an array by the scalar function itself: for a formula whose
    numpy form need not round as Python's does (a power, a logarithm) or that takes numbers only (a collective's time)."""
    if isinstance(values, np.ndarray):
        return np.array([function(value) for value in values.tolist()], dtype=np.float64)
    return function(values)

# Fixed cost of one GEMM: the time left over once the tile/wave model's compute is taken out of Azure's cuBLASLt
# GEMMs that fit in one or two waves (Azure/AI-benchmarking-guide Azure_Results: ND_A100_v4 FP16 1024³ 4.6 µs,
# 1024×2145×1024 7.1 µs; ND_H100_v5 FP8 1024³ 6.1 µs, 2048³ 5.8 µs, 1024×2145×1024 5.4 µs; mean 5.8 µs). Vidur's
# memory-bound layer GEMMs (1 token, A100 and H100) take 2-8 µs longer than their bytes at the stream rate.
GEMM_FILL_S = 6.0e-6
# Output tile of one thread block, rows × columns: one of the tiles cuBLAS uses (NVIDIA's Matrix Multiplication
# Background guide, §2.3, lists 256×128, 128×256, 128×128, 256×64, 64×256, 128×64, 64×128 and 64×64; CUTLASS's SM80
# default is 128×256, DeepGEMM's SM90 baseline 128×128). One tile for every GPU: of the large ones it is the closest to
# Vidur's layer GEMMs (mean absolute error 12.4%; 128×256 13.3%, 256×128 14.7%), cuBLAS picking smaller tiles for
# these transformer shapes than for its best-case squares.
GEMM_TILE_M = 128
GEMM_TILE_N = 128
# Below one tile of rows the kernel uses a narrower tile, at least one tensor-core MMA high (m16n8k16, PTX ISA).
GEMM_MIN_TILE_M = 16
# Memory efficiency reaches half its maximum at 2 MB: the fit of e_max·B/(B + B_half) to Calculon's HBM efficiency steps
# (≥100 MB 0.90, ≥10 MB 0.75, < 1 MB 0.3; reference §3).
MEMORY_HALF_BYTES = 2.0e6
# Used only when a profile has no measurement: the median of the measured large-GEMM fractions of peak in reference §2
# (A100 87%, H100 80%, B200 78%, GB200 73%, MI300X 51%) and the median HBM stream fraction (79-95% ranges, midpoints).
DEFAULT_GEMM_EFFICIENCY = 0.78
DEFAULT_HBM_EFFICIENCY = 0.87
# Fused (flash) attention reaches a lower fraction of peak than a plain GEMM: FlashAttention-2's forward pass tops out
# at 73% of A100 peak (Dao, arXiv 2307.08691, §4.1: "up to 230 TFLOPs/s"), FlashAttention-3 at 740 TFLOP/s BF16 on
# H100, 75% of peak (arXiv 2407.08608). One fraction for every GPU; never above the GPU's own GEMM rate.
ATTENTION_PEAK_FRACTION = 0.73
# Fused decode attention over a paged KV cache reads it more slowly than a plain copy streams, and pays a fixed cost per
# call (split-KV partials and their combine). Fitted to Vidur's profile of vLLM's FlashAttention decode on an A100
# (microsoft/vidur e2d00e9, data/profiling/a100/attention.csv: all 10,240 decode points, batch 1-128, 32-4,032 cached
# tokens, 8 KV heads of 128 over TP 2): t = 13.4 µs + KV bytes / 1,561 GB/s, mean absolute error 11 %. That rate is
# 0.93 of the A100 profile's measured stream rate (1.68 TB/s), where the plain HBM curve was 23 % fast in the median.
# Used on every GPU whose profile has no calibrated decode-attention curve.
DECODE_ATTENTION_FIXED_S = 13.4e-6
DECODE_ATTENTION_STREAM_FRACTION = 1561 / 1680
# vLLM's fused-MoE kernel (Triton) takes longer than streaming the weights of the experts it runs: a fixed time per call
# (routing, aligning the tokens to the experts' blocks, summing their outputs) and one per expert touched (each expert's
# tile pipelines start and drain). Both are fitted to NVIDIA aiconfigurator's measured BF16 fused-MoE calls, beyond
# rlsim's price of their expert GEMMs and routing (calibration/fused_moe.py). A profile's `measured.fused_moe_call_us`
# and `fused_moe_expert_us` give its own; these defaults, fitted to every row of the four measured GPUs (H100, H200,
# B200, GB200), serve the others. SGLang's engines pay them too: their Triton fused-MoE kernel measures within 3 % of
# vLLM's on H100 and H200 in the same tables.
DEFAULT_FUSED_MOE_CALL_S = 10.6e-6
DEFAULT_FUSED_MOE_EXPERT_S = 0.12e-6


@dataclass(frozen=True)
class GPURates:
    """What one GPU achieves for a given compute dtype: asymptotic GEMM FLOP/s and streaming HBM bytes/s.

    `sm_count`: blocks that run at once (SMs, or AMD compute units); None leaves out wave quantization and split-K.
    """

    name: str
    peak_flops: float
    gemm_flops: float
    hbm_bytes_per_s: float
    memory_bytes: float
    sm_count: int | None = None
    memory_half_bytes: float = MEMORY_HALF_BYTES
    fused_attention_flops: float | None = None  # a calibrated prefill-attention rate; None: ATTENTION_PEAK_FRACTION
    # The decode-attention KV read rate and its fixed cost in bytes (from_profile: the profile's calibrated curve, else
    # the DECODE_ATTENTION_* defaults); None: the HBM curve above.
    decode_attention_bytes_per_s: float | None = None
    decode_attention_half_bytes: float = 0.0
    # Fixed times of a fused-MoE decode kernel beyond streaming the experts' weights: per call, per expert touched.
    moe_call_seconds: float = DEFAULT_FUSED_MOE_CALL_S
    moe_expert_seconds: float = DEFAULT_FUSED_MOE_EXPERT_S
    # The same GPU's asymptotic FP8 GEMM rate (None: no FP8 tensor cores), for GEMMs run in FP8 beside 16-bit work
    # (FP8 training: `in_fp8`).
    fp8_gemm_flops: float | None = None

    @classmethod
    def from_profile(cls, gpu: GPUProfile, dtype: str = "bf16") -> GPURates:
        peak = gpu.peak_flops(dtype)
        measured_gemm = gpu.measured.gemm_bf16_flops
        # The measured BF16 fraction of peak is taken to hold for the other dtypes of the same GPU, FP8 too unless the
        # profile measures FP8 (on an H100 it reaches 70 % of its peak where BF16 reaches 80 %).
        gemm_efficiency = measured_gemm / gpu.peak_flops("bf16") if measured_gemm else DEFAULT_GEMM_EFFICIENCY
        fp8_peak, measured_fp8 = gpu.peak_tflops.fp8, gpu.measured.gemm_fp8_flops
        fp8_gemm = None if fp8_peak is None else measured_fp8 or fp8_peak.value * 1e12 * gemm_efficiency
        if dtype.strip().lower() == "fp8" and fp8_gemm is not None:
            gemm_efficiency = fp8_gemm / peak
        stream = gpu.measured.hbm_stream_bytes_per_s or gpu.hbm_bytes_per_s * DEFAULT_HBM_EFFICIENCY
        sm_count = gpu.sm_count.value if gpu.sm_count is not None else None
        moe_call, moe_expert = gpu.measured.fused_moe_call_seconds, gpu.measured.fused_moe_expert_seconds
        rates = cls(gpu.name, peak, peak * gemm_efficiency, stream, gpu.memory_bytes, sm_count,
                    moe_call_seconds=DEFAULT_FUSED_MOE_CALL_S if moe_call is None else moe_call,
                    moe_expert_seconds=DEFAULT_FUSED_MOE_EXPERT_S if moe_expert is None else moe_expert,
                    fp8_gemm_flops=fp8_gemm)
        if gpu.calibration is not None:
            rates = rates._calibrated(gpu.calibration, dtype.strip().lower())
        if rates.decode_attention_bytes_per_s is None:
            decode = rates.hbm_bytes_per_s * DECODE_ATTENTION_STREAM_FRACTION
            rates = replace(rates, decode_attention_bytes_per_s=decode,
                            decode_attention_half_bytes=DECODE_ATTENTION_FIXED_S * decode)
        return rates

    def _calibrated(self, calibration: GPUCalibration, dtype: str) -> GPURates:
        """These rates with the profile's fitted curves in place of the defaults (see the module doc)."""
        changes: dict[str, Any] = {}
        own = calibration.gemm_curve(dtype)
        if own is not None:
            changes["gemm_flops"] = own.tflops.value * 1e12
        fp8 = calibration.gemm_curve("fp8")
        if fp8 is not None:
            changes["fp8_gemm_flops"] = fp8.tflops.value * 1e12
        if calibration.hbm is not None:
            bandwidth = calibration.hbm.gbyte_per_s.value * 1e9
            changes |= {"hbm_bytes_per_s": bandwidth, "memory_half_bytes": calibration.hbm.fixed_us.value * 1e-6 * bandwidth}
        if calibration.attention_prefill is not None:
            changes["fused_attention_flops"] = calibration.attention_prefill.tflops.value * 1e12
        if calibration.decode_attention is not None:
            bandwidth = calibration.decode_attention.gbyte_per_s.value * 1e9
            changes |= {"decode_attention_bytes_per_s": bandwidth,
                        "decode_attention_half_bytes": calibration.decode_attention.fixed_us.value * 1e-6 * bandwidth}
        return replace(self, **changes)

    def sustained(self, fraction: float) -> GPURates:
        """These rates with every kernel `fraction` as fast: what a whole training step sustains, where the rates above
        are each kernel's own (rlsim.overheads.TRAINING_KERNEL_EFFICIENCY)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"a sustained fraction is in (0, 1], got {fraction}")
        attention = None if self.fused_attention_flops is None else self.fused_attention_flops * fraction
        fp8 = None if self.fp8_gemm_flops is None else self.fp8_gemm_flops * fraction
        return replace(self, gemm_flops=self.gemm_flops * fraction, hbm_bytes_per_s=self.hbm_bytes_per_s * fraction,
                       fused_attention_flops=attention, fp8_gemm_flops=fp8)

    def in_fp8(self) -> GPURates:
        """These rates with GEMMs at the GPU's FP8 rate (everything else unchanged)."""
        if self.fp8_gemm_flops is None:
            raise ValueError(f"{self.name} has no FP8 tensor cores")
        return replace(self, gemm_flops=self.fp8_gemm_flops)

    def compute_seconds(self, flops: Amount) -> Amount:
        """Time of a GEMM-like kernel doing `flops`, compute-bound, shape unknown (no tile or wave quantization)."""
        return GEMM_FILL_S + flops / self.gemm_flops

    def memory_seconds(self, nbytes: Amount) -> Amount:
        """Time to stream `nbytes` through HBM (read plus write counted by the caller); element by element for an
        array."""
        return (nbytes + self.memory_half_bytes) / self.hbm_bytes_per_s

    def kernel_seconds(self, flops: float, nbytes: float) -> float:
        """Roofline of a kernel of unknown shape: bound by whichever of compute and memory takes longer (element by
        element when either is an array)."""
        compute, memory = self.compute_seconds(flops), self.memory_seconds(nbytes)
        if isinstance(compute, np.ndarray) or isinstance(memory, np.ndarray):
            return np.maximum(compute, memory)  # type: ignore[return-value]  # arrays in, an array out
        return max(compute, memory)

    @property
    def attention_flops(self) -> float:
        """Asymptotic FLOP/s of a fused attention kernel (scores, softmax and weighted values in one pass)."""
        if self.fused_attention_flops is not None:
            return self.fused_attention_flops
        return min(self.gemm_flops, ATTENTION_PEAK_FRACTION * self.peak_flops)

    @property
    def attention_bytes_per_s(self) -> float:
        """Rate at which a fused attention kernel streams the KV cache: the decode-attention rate, else HBM's."""
        return self.decode_attention_bytes_per_s or self.hbm_bytes_per_s

    def attention_memory_seconds(self, nbytes: float) -> float:
        """Time of a fused attention kernel's KV/Q/O traffic."""
        _, fixed_bytes, bytes_per_s = self.attention_roofline
        return (nbytes + fixed_bytes) / bytes_per_s

    @cached_property
    def attention_roofline(self) -> tuple[float, float, float]:
        """(FLOP/s, fixed cost in bytes, bytes/s) of a fused attention kernel, as `attention_seconds` and
        `attention_memory_seconds` use them: worked out once, an engine prices attention at every iteration."""
        if self.decode_attention_bytes_per_s is None:
            return self.attention_flops, self.memory_half_bytes, self.hbm_bytes_per_s
        return self.attention_flops, self.decode_attention_half_bytes, self.decode_attention_bytes_per_s

    def attention_seconds(self, flops: float, nbytes: float) -> float:
        """Roofline of a fused attention kernel: its FLOPs at the attention rate, or its KV/Q/O traffic through HBM."""
        return max(GEMM_FILL_S + flops / self.attention_roofline[0], self.attention_memory_seconds(nbytes))

    def gemm_compute_seconds(self, m: float, n: float, k: float) -> float:
        """Tensor-core time of an (m×k)·(k×n) GEMM after tile and wave quantization, without the fill cost.

        The padded work of every wave, at the measured large-GEMM rate; m may be fractional (an average over groups).
        """
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        tile_m = GEMM_TILE_M if m >= GEMM_TILE_M else max(GEMM_MIN_TILE_M, 2 ** math.ceil(math.log2(m)))
        tiles = math.ceil(m / tile_m) * math.ceil(n / GEMM_TILE_N)
        tile_flops = 2.0 * tile_m * GEMM_TILE_N * k
        if self.sm_count is None:
            return tiles * tile_flops / self.gemm_flops
        sms = self.sm_count
        split = max(1, sms // tiles)  # split-K until the blocks fill one wave
        waves = math.ceil(tiles * split / sms)
        return waves * sms * tile_flops / split / self.gemm_flops

    def gemm_seconds(
        self, m: float, n: float, k: float, dtype_bytes: float = 2.0, nbytes: float | None = None
    ) -> float:
        """(m×k)·(k×n): 2mnk FLOPs; reads both operands and writes the result once (`nbytes` overrides that traffic,
        e.g. for weights stored narrower than the activations). Fill + the longer of quantized compute and memory.

        Any of m, n, k and `nbytes` may be a numpy array (GEMMs over a range of token counts): then each element is
        priced by the same float operations in the same order, so it equals the scalar result to the bit."""
        traffic = dtype_bytes * (m * k + k * n + m * n) if nbytes is None else nbytes
        if isinstance(traffic, np.ndarray) or isinstance(m, np.ndarray):
            compute = self._gemm_compute_seconds_many(m, n, k)
            return GEMM_FILL_S + np.maximum(compute, self.memory_seconds(traffic))  # type: ignore[return-value]
        return GEMM_FILL_S + max(self.gemm_compute_seconds(m, n, k), self.memory_seconds(traffic))

    def _gemm_compute_seconds_many(self, m: Any, n: Any, k: Any) -> NDArray[np.float64]:
        """`gemm_compute_seconds` element by element over arrays (or numbers) m, n, k, to the bit. Rows below one tile
        take a tile found by math.log2, whose rounding numpy's need not share: the scalar function prices those."""
        m, n, k = np.broadcast_arrays(np.asarray(m, dtype=np.float64), np.asarray(n, dtype=np.float64),
                                      np.asarray(k, dtype=np.float64))
        seconds = np.zeros(m.shape)
        live = (m > 0) & (n > 0) & (k > 0)
        narrow = live & (m < GEMM_TILE_M)
        if narrow.any():
            seconds[narrow] = [self.gemm_compute_seconds(*mnk) for mnk in
                               zip(m[narrow].tolist(), n[narrow].tolist(), k[narrow].tolist(), strict=True)]
        wide = live & ~narrow
        # Whole numbers from here on (tiles, split, waves): exact in float64, as Python's ints are.
        tiles = np.ceil(m[wide] / GEMM_TILE_M) * np.ceil(n[wide] / GEMM_TILE_N)
        tile_flops = 2.0 * GEMM_TILE_M * GEMM_TILE_N * k[wide]
        if self.sm_count is None:
            seconds[wide] = tiles * tile_flops / self.gemm_flops
            return seconds
        sms = self.sm_count
        split = np.maximum(1.0, sms // tiles)  # split-K until the blocks fill one wave
        waves = np.ceil(tiles * split / sms)
        seconds[wide] = waves * sms * tile_flops / split / self.gemm_flops
        return seconds

