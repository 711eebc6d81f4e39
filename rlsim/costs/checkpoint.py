"""A training checkpoint: the bytes of a trained role's state, and the seconds to write it to storage, read it back,
or copy it to host memory for a background write.

What is saved is what resuming needs (verl's checkpoint contents `model` and `optimizer`): every trained parameter's
fp32 master copy and Adam's two moments (12 bytes, arXiv 1910.02054 §3.1), plus, under Megatron, the bf16 weights its
distributed checkpoint stores beside the optimizer's fp32 main parameters (14 bytes a parameter). FSDP keeps its
parameters in fp32 (verl's FSDP workers build the model in fp32 and compute in bf16), so the saved model state is the
master copy itself: 12 bytes. Under LoRA only the adapters train and are saved; the frozen base is the model read at
start-up. Gradients are never saved.
"""
from __future__ import annotations

import math

from rlsim.costs.layout import TrainingLayout
from rlsim.costs.lora import adapter_params
from rlsim.costs.memory import ADAM_STATE_BYTES, BF16
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS


def trained_parameters(spec: ModelSpec, layout: TrainingLayout) -> float:
    """Parameters the optimizer steps: the whole model, or its LoRA adapters."""
    if not layout.lora_rank:
        return float(spec.total_params)
    return float(sum(spec.layer_count(kind) * sum(adapter_params(spec, kind, layout.lora_rank))
                     for kind in LAYER_KINDS if spec.layer_count(kind)))


def checkpoint_bytes(spec: ModelSpec, layout: TrainingLayout) -> float:
    """Bytes one trained role's checkpoint holds, all its ranks together."""
    per_parameter = ADAM_STATE_BYTES + (BF16 if layout.backend == "megatron" else 0)
    return per_parameter * trained_parameters(spec, layout)


def nodes_of(gpus: int, gpus_per_node: int) -> int:
    """Nodes a role's GPUs occupy: each node's ranks write (and read) their shards in parallel."""
    return max(1, math.ceil(gpus / gpus_per_node))


def storage_seconds(nbytes: float, nodes: int, bytes_per_s_per_node: float) -> float:
    """Writing or reading `nbytes` spread evenly over `nodes` nodes, each at `bytes_per_s_per_node`."""
    return nbytes / (nodes * bytes_per_s_per_node)
