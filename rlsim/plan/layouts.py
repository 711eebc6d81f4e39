"""The training layouts `rlsim plan` tries for its winner: the parallel degrees and ZeRO stage of the training role
(tp, pp, cp, ep, zero_stage) and its activation recompute, within the winner's backend, GPUs and micro-batch budget.

A layout is kept when a Megatron or FSDP run could use it: tensor parallelism inside one node and dividing the
attention and KV heads, pipeline stages no more than the layers, Ulysses context parallelism dividing the heads per
TP rank (FSDP), expert parallelism dividing the experts and the tp·cp·dp ranks (MoE), and tp·pp·cp dividing the
training GPUs. Memory and the scenario's own checks prune the rest before the estimate ranks them.
"""
from __future__ import annotations

from itertools import product
from typing import Any

from rlsim.config.schema import TrainingPlacement
from rlsim.models import ModelSpec

DEGREES = (1, 2, 4, 8)
RECOMPUTE = ("full", "none")
# Megatron shards the optimizer with its distributed optimizer (ZeRO-1) or not at all; FSDP's ZeRO-2 keeps the
# weights whole, ZeRO-3 shards them too.
ZERO_STAGES = {"megatron": (1, 0), "fsdp": (3, 2), "fsdp2": (3, 2)}


def training_layouts(spec: ModelSpec, training: TrainingPlacement, gpus_per_node: int) -> list[dict[str, Any]]:
    """Every layout to try for `training` (a resolved placement) of `spec`, as placement.training overrides, the
    placement's own first."""
    arch = spec.architecture
    assert training.gpus is not None, "the planner passes resolved scenarios"
    gpus, megatron = training.gpus, training.backend == "megatron"
    experts = arch.moe.num_experts if arch.moe is not None else 1
    found: list[dict[str, Any]] = []
    for tp, pp, cp, ep, zero, recompute in product(DEGREES, DEGREES if megatron else (1,), DEGREES, DEGREES,
                                                   ZERO_STAGES[training.backend], RECOMPUTE):
        if not megatron and tp > 1:
            continue  # verl's and NeMo-RL's FSDP workers shard data, not tensors
        heads_per_rank = arch.num_attention_heads // tp if arch.num_attention_heads % tp == 0 else 0
        if (tp > gpus_per_node or not heads_per_rank or arch.num_key_value_heads % tp or pp > arch.num_hidden_layers
                or gpus % (tp * pp * cp) or (not megatron and heads_per_rank % cp)):
            continue
        dp = gpus // (tp * pp * cp)
        if ep > 1 and (arch.moe is None or experts % ep or (tp * cp * dp) % ep):
            continue
        found.append({"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp, "zero_stage": zero,
                      "activation_recompute": recompute})
    own = {"tp": training.tp, "pp": training.pp, "cp": training.cp, "ep": training.ep, "dp": training.dp,
           "zero_stage": training.zero_stage, "activation_recompute": training.activation_recompute}
    return [own, *(layout for layout in found if layout != own)]


def layout_label(layout: dict[str, Any]) -> str:
    degrees = " ".join(f"{k}{layout[k]}" for k in ("tp", "pp", "cp", "ep") if layout[k] > 1) or "dp only"
    return f"training {degrees}, ZeRO-{layout['zero_stage']}, recompute {layout['activation_recompute']}"
