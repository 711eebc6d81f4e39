"""The number format of a scenario's engines' weights (`model.dtype`) and what it costs on the engine's GPU (the KV
cache's, `placement.rollout.kv_cache_dtype`, is the model spec's kv_dtype_bytes: models.spec.KV_CACHE_DTYPE_BYTES).

Quantized weights (fp8, fp4) are quantized with their input activations where the GPU has tensor cores for the type
(vLLM's W8A8 FP8 path on Hopper and later, verl's FP8 rollout with 128x128 weight blocks and 1x128 activation groups;
W4A4 NVFP4 on Blackwell): the layer GEMMs run at the narrow type's rate after a kernel that quantizes their input.
On a GPU without them vLLM keeps the weights narrow in memory and dequantizes them inside a 16-bit GEMM (its Marlin
kernels, W8A16 FP8 on Ampere and W4A16 FP4 before Blackwell): the weight traffic shrinks, the arithmetic does not.
Embeddings and the output head stay 16-bit either way (vLLM quantizes the decoder layers' linear layers only).
"""
from __future__ import annotations

from dataclasses import dataclass

from rlsim.costs.compute import GPURates
from rlsim.hardware import GPUProfile
from rlsim.models import ModelSpec

# Bytes per weight element, scale factors included. FP8's 128x128 blocks add one fp32 scale per 16,384 weights
# (0.02 %, left out). NVFP4 stores 4-bit E2M1 values with one FP8 (E4M3) scale per 16 of them: 0.5 + 1/16 bytes
# (NVIDIA technical blog "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", June 2025).
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16}
QUANTIZED = ("fp8", "fp4")


@dataclass(frozen=True)
class EnginePrecision:
    rates: GPURates  # the 16-bit kernels: attention, norms, the output head, unquantized GEMMs
    weight_bytes: float  # per decoder-layer weight
    quantized_rates: GPURates | None  # weights and activations quantized: the layer GEMMs' rates; None: 16-bit GEMMs

    @property
    def mode(self) -> str:
        """How the layer GEMMs run, for reports: 16-bit, weight-only (dequantized in a 16-bit GEMM) or quantized."""
        if self.weight_bytes >= WEIGHT_BYTES["bf16"]:
            return "16-bit"
        return "weight-only" if self.quantized_rates is None else "weights and activations"


def has_tensor_cores_for(gpu: GPUProfile, dtype: str) -> bool:
    return getattr(gpu.peak_tflops, dtype, None) is not None


def engine_precision(gpu: GPUProfile, weight_dtype: str) -> EnginePrecision:
    """The rates and weight width of engines with `weight_dtype` weights on `gpu` (see the module notes)."""
    if weight_dtype not in QUANTIZED:
        return EnginePrecision(GPURates.from_profile(gpu, weight_dtype), WEIGHT_BYTES[weight_dtype], None)
    rates = GPURates.from_profile(gpu, "bf16")
    quantized = GPURates.from_profile(gpu, weight_dtype) if has_tensor_cores_for(gpu, weight_dtype) else None
    return EnginePrecision(rates, WEIGHT_BYTES[weight_dtype], quantized)


def engine_weight_bytes(spec: ModelSpec, weight_dtype: str) -> float:
    """Bytes of one copy of the engine's weights: the decoder layers at `weight_dtype`, the embedding and the output
    head 16-bit."""
    width = WEIGHT_BYTES[weight_dtype]
    if weight_dtype not in QUANTIZED:
        return spec.total_params * width
    vocab = spec.embedding_params
    return (spec.total_params - vocab) * width + vocab * WEIGHT_BYTES["bf16"]
