"""LoRA: low-rank adapters trained in place of the weights (Hu et al., arXiv 2106.09685).

Every linear layer of the decoder but the MoE router (PEFT's `all-linear`, verl's default `target_modules`) gets an
adapter: A (in × r) and B (r × out), so y = x·W + (x·A)·B with W frozen. What changes in an RL step:

* training keeps W in 16-bit without gradients or optimizer state; only the adapters have them (memory);
* the backward pass still propagates gradients through W (the input gradient) but computes no weight gradient for
  it, about a third of a full step's GEMM work ("LoRA Without Regret", Thinking Machines 2025: ~2/3 of full
  fine-tuning's compute), and the adapters add small GEMMs of their own;
* only adapter gradients are reduced over data-parallel ranks and only adapters are stepped;
* only adapters move to the engines (verl loads them with vLLM's add_lora), which keep the base weights: a colocated
  engine then sleeps at level 1, backing its weights up rather than discarding them;
* an engine serving an unmerged adapter runs two extra small GEMMs per linear layer (vLLM's punica shrink and
  expand kernels): at rank 8 vLLM measured 34 % less throughput on Llama-2-7B (vllm-project/vllm#11267).
"""
from __future__ import annotations

from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS, LayerKind

# Linear layers PEFT's all-linear leaves out: the MoE router (a gate whose output is a routing decision).
UNTARGETED = ("mlp.gate",)
ADAPTER_BYTES = 2  # bf16 adapters


def adapter_params(spec: ModelSpec, kind: LayerKind, rank: int) -> tuple[float, float]:
    """(dense, routed-expert) adapter parameters of one layer of `kind`: rank × (in + out) per targeted matrix."""
    dense = expert = 0.0
    for shape in spec.layer_gemm_shapes(kind):
        if shape.name in UNTARGETED:
            continue
        params = rank * (shape.in_features + shape.out_features) * shape.count
        if shape.name.startswith("mlp.experts"):
            expert += params
        else:
            dense += params
    return dense, expert


def adapter_matrices(spec: ModelSpec) -> int:
    """Adapter tensors of the whole model (A and B per targeted matrix, one pair per routed expert)."""
    return sum(2 * shape.count * spec.layer_count(kind) for kind in LAYER_KINDS if spec.layer_count(kind)
               for shape in spec.layer_gemm_shapes(kind) if shape.name not in UNTARGETED)


def adapter_bytes(spec: ModelSpec, rank: int) -> float:
    """Bytes of every adapter of the model."""
    return ADAPTER_BYTES * sum(spec.layer_count(kind) * sum(adapter_params(spec, kind, rank))
                               for kind in LAYER_KINDS if spec.layer_count(kind))
