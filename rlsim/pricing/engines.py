"""A scenario's generation engines priced once, the same way for the simulation, the estimate and the metrics: their
cost model (with the framework overheads of their pool's hosts) and the KV cache each engine holds."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rlsim.config.bound import Bound
from rlsim.costs.collectives import Op, collective_time
from rlsim.costs.engine_kernels import CollectiveSeconds
from rlsim.costs.layout import EngineLayout
from rlsim.costs.memory import RoleMemory, engine_kv_tokens
from rlsim.costs.rollout import EngineCosts
from rlsim.costs.speculative import Speculation
from rlsim.models import ModelSpec
from rlsim.pricing.drafter import drafter_spec
from rlsim.pricing.layouts import engine_layout, engine_overheads
from rlsim.pricing.memory import rollout_memory
from rlsim.pricing.precision import engine_precision
from rlsim.topology import CommGroup
from rlsim.workload.judge import JUDGE_WEIGHT_DTYPE, judge_scenario

# How a caller times a collective of its engines' group: (op, group) -> seconds by message size.
CollectivePricer = Callable[[Op, CommGroup | None], CollectiveSeconds]


def collective_seconds(op: Op, group: CommGroup | None) -> CollectiveSeconds:
    if group is None:
        raise ValueError(f"an engine over several GPUs needs its group to price its {op}")
    return lambda nbytes: collective_time(op, nbytes, group).seconds


def free_collective(op: Op, group: CommGroup | None) -> CollectiveSeconds:
    """Collectives left unpriced: for questions their time does not answer (the weight bytes a decode reads) or
    that a note says leave them out."""
    return lambda nbytes: 0.0


def engine_costs(bound: Bound, spec: ModelSpec, layout: EngineLayout, group: CommGroup | None,
                 collective: CollectivePricer = collective_seconds, *, policy: bool = True) -> EngineCosts:
    """The cost model of `layout`'s engines of `spec`; `group` is one engine's TP group (None on one GPU). `policy`:
    the policy's engines, with the scenario's generation levers (weight format, speculative decoding, expert
    imbalance, LoRA adapter); else another model's (the LLM judge): its own 16-bit checkpoint, none of them."""
    weight_dtype = bound.scenario.model.dtype if policy else JUDGE_WEIGHT_DTYPE
    precision = engine_precision(bound.gpu(layout.pool), weight_dtype)
    all_reduce = collective("all_reduce", group) if layout.tp > 1 else None
    all_to_all = collective("all_to_all", group) if layout.ep > 1 else None
    overheads = engine_overheads(bound.framework(layout.pool), layout)
    formats: dict[str, Any] = {"weight_dtype_bytes": precision.weight_bytes, "quantized_rates": precision.quantized_rates}
    levers: dict[str, Any] = {}
    if policy:
        rollout = bound.scenario.placement.rollout
        levers = {"expert_load_imbalance": rollout.expert_load_imbalance,
                  "lora_rank": bound.scenario.placement.training.lora_rank}
        if rollout.speculative is not None:
            # The drafter runs on the engine's GPUs with the same split and format (vLLM's draft TP is the target's).
            drafter = drafter_spec(bound.scenario, spec)
            draft = None if drafter is None else EngineCosts.for_layout(
                drafter, precision.rates, replace(layout, ep=1), all_reduce, None, overheads, **formats)
            levers["speculation"] = Speculation(rollout.speculative.num_speculative_tokens,
                                                rollout.speculative.acceptance_rate, draft)
    return EngineCosts.for_layout(spec, precision.rates, layout, all_reduce, all_to_all, overheads, **formats, **levers)


def policy_engine_memory(bound: Bound) -> RoleMemory:
    """One GPU of the policy's engines (what `rollout_memory` reports for the scenario's rollout role)."""
    return rollout_memory(bound.scenario, bound.model, bound.gpu(bound.scenario.placement.rollout.pool))


def policy_kv_tokens(bound: Bound) -> int:
    """KV-cache tokens each of the policy's engines holds."""
    return engine_kv_tokens(policy_engine_memory(bound), bound.model, engine_layout(bound.scenario.placement.rollout).tp)


def judge_kv_tokens(bound: Bound, layout: EngineLayout) -> int:
    """KV-cache tokens each LLM-judge engine holds: its own GPUs, no training state beside it, prompts as long as
    the policy's sequences plus the judge's instruction."""
    assert bound.reward_model is not None, "bind() loads the judge"
    memory = rollout_memory(judge_scenario(bound.scenario), bound.reward_model, bound.gpu(layout.pool))
    return engine_kv_tokens(memory, bound.reward_model, layout.tp)
