"""Roofline time of GPU kernels with size-dependent efficiency.

A kernel takes the longer of its compute time and its memory time. Neither rate is a constant fraction of peak: small
operations fill the GPU poorly. Both curves have the form the reference recommends, eff(x) = e_max·x/(x + x_half), which
is the same as a fixed fill cost plus work at the asymptotic rate:

    compute:  t = GEMM_FILL_S + flops / (e_gemm · peak_flops)
    memory:   t = (bytes + MEMORY_HALF_BYTES) / (e_hbm · hbm_bytes_per_s)

e_gemm and e_hbm come from each GPU profile's public measurements (best large BF16 GEMM, HBM stream), so a calibrated
profile changes them without touching this file.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlsim.hardware import GPUProfile

# Fixed cost of one GEMM: least-squares fit of t = t0 + F/R to the H100 FP8 GEMM series in the hardware reference §2
# (274 TF at 1024³, 1011 at 2048³, 1217 at 4096³, 1377 at 16384³): t0 = 6.0 µs, R = 0.70·peak, every point within 9%.
GEMM_FILL_S = 6.0e-6
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


@dataclass(frozen=True)
class GPURates:
    """What one GPU achieves for a given compute dtype: asymptotic GEMM FLOP/s and streaming HBM bytes/s."""

    name: str
    peak_flops: float
    gemm_flops: float
    hbm_bytes_per_s: float
    memory_bytes: float

    @classmethod
    def from_profile(cls, gpu: GPUProfile, dtype: str = "bf16") -> GPURates:
        peak = gpu.peak_flops(dtype)
        measured_gemm = gpu.measured.gemm_bf16_flops
        # The measured BF16 fraction of peak is taken to hold for the other dtypes of the same GPU.
        gemm_efficiency = measured_gemm / gpu.peak_flops("bf16") if measured_gemm else DEFAULT_GEMM_EFFICIENCY
        stream = gpu.measured.hbm_stream_bytes_per_s or gpu.hbm_bytes_per_s * DEFAULT_HBM_EFFICIENCY
        return cls(gpu.name, peak, peak * gemm_efficiency, stream, gpu.memory_bytes)

    def compute_seconds(self, flops: float) -> float:
        """Time of a GEMM-like kernel doing `flops`, compute-bound."""
        return GEMM_FILL_S + flops / self.gemm_flops

    def memory_seconds(self, nbytes: float) -> float:
        """Time to stream `nbytes` through HBM (read plus write counted by the caller)."""
        return (nbytes + MEMORY_HALF_BYTES) / self.hbm_bytes_per_s

    def kernel_seconds(self, flops: float, nbytes: float) -> float:
        """Roofline: a kernel is bound by whichever of compute and memory takes longer."""
        return max(self.compute_seconds(flops), self.memory_seconds(nbytes))

    @property
    def attention_flops(self) -> float:
        """Asymptotic FLOP/s of a fused attention kernel (scores, softmax and weighted values in one pass)."""
        return min(self.gemm_flops, ATTENTION_PEAK_FRACTION * self.peak_flops)

    def attention_seconds(self, flops: float, nbytes: float) -> float:
        """Roofline of a fused attention kernel: its FLOPs at the attention rate, or its KV/Q/O traffic through HBM."""
        return max(GEMM_FILL_S + flops / self.attention_flops, self.memory_seconds(nbytes))

    def gemm_seconds(self, m: float, n: float, k: float, dtype_bytes: float = 2.0) -> float:
        """(m×k)·(k×n): 2mnk FLOPs; reads both operands and writes the result once."""
        return self.kernel_seconds(2.0 * m * n * k, dtype_bytes * (m * k + k * n + m * n))
