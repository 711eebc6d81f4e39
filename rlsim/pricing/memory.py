"""Memory per GPU role of a scenario, and what would fit when a role does not: the "what would fit" search proposes
changes to the scenario's own fields (so a hint reads as the YAML edit to make) and checks each against the cost
models' memory (rlsim.costs.memory) before proposing it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rlsim.config.schema import OffloadWhileGenerating, Scenario, TrainingPlacement
from rlsim.costs.layout import EngineLayout
from rlsim.costs.memory import (
    GIB,
    RoleMemory,
    engine_memory,
    resident_training_bytes,
    training_memory_of,
)
from rlsim.hardware import GPUProfile
from rlsim.models import Architecture, ModelSpec
from rlsim.pricing.drafter import drafter_spec
from rlsim.pricing.layouts import engine_layout, prefill_layout, training_layout
from rlsim.pricing.precision import engine_weight_bytes
from rlsim.pricing.role_memory import group_memory_of, guest_state, roles_on
from rlsim.pricing.role_memory import with_guests as _with_guests

# The smallest micro-batch budget a hint proposes: halving stops here.
MIN_HINT_MICRO_BATCH_TOKENS = 512
# Tensor parallelism beyond one 8-GPU NVLink node is not proposed (its per-layer collectives would cross the network).
MAX_HINT_TP = 8


# ---------------------------------------------------------------------------------------------------- training role


def training_memory(scenario: Scenario, spec: ModelSpec, gpu: GPUProfile,
                    reward_spec: ModelSpec | None = None) -> RoleMemory:
    """Peak memory of an actor-training GPU during the update, with the state of the roles placed to share its GPUs;
    when it does not fit, hints that were checked to fit."""
    layout = scenario.placement.training
    critic = scenario.algorithm.critic and scenario.placement.critic is None
    reference = resident_reference(scenario)
    sharing = guest_state(scenario, spec, reward_spec, "actor")
    memory = _with_guests(training_memory_of(spec, training_layout(layout), gpu.memory_bytes, critic=critic,
                                             reference=reference, pool=layout.pool or ""), sharing)
    if memory.fits:
        return memory

    gpus = layout.tp * layout.pp * layout.cp * (layout.dp or 1)

    def fits(changes: dict[str, Any]) -> float | None:
        model_parallel = changes.get("tp", layout.tp) * changes.get("pp", layout.pp) * changes.get("cp", layout.cp)
        if gpus % model_parallel:
            return None
        # The GPU count stays: a larger model-parallel degree leaves fewer data-parallel ranks.
        dp = gpus // model_parallel
        if (changes.get("tp", layout.tp) * changes.get("cp", layout.cp) * dp) % layout.ep:
            return None
        candidate = layout.model_copy(update={**changes, "dp": dp})
        memory = _with_guests(training_memory_of(spec, training_layout(candidate), gpu.memory_bytes, critic=critic,
                                                 reference=reference), sharing)
        return memory.total_bytes if memory.fits else None

    longest = scenario.algorithm.model_len
    hints = _verified_hints("placement.training", _training_options(spec, layout, longest), fits)
    return RoleMemory(memory.role, memory.pool, memory.capacity_bytes, memory.components, notes=memory.notes,
                      hints=hints)


def _training_options(spec: ModelSpec, layout: TrainingPlacement, longest: int) -> list[dict[str, Any]]:
    """Single changes that lower training memory, cheapest first; a field's later options go further (smaller, larger)."""
    arch = spec.architecture
    options: list[dict[str, Any]] = []
    if layout.zero_stage < 3:
        options.append({"zero_stage": 3})
    if layout.activation_recompute != "full":
        options.append({"activation_recompute": "full"})
    # A micro-batch must still hold the longest sequence (split over the context-parallel group).
    for budget in ("logprob_micro_batch_tokens", "micro_batch_tokens"):
        tokens = (getattr(layout, budget) or 0) // 2
        while tokens >= MIN_HINT_MICRO_BATCH_TOKENS and tokens * layout.cp >= longest:
            options.append({budget: tokens})
            tokens //= 2
    if not layout.offload_optimizer:
        options.append({"offload_optimizer": True})
    if not layout.offload_params:
        options.append({"offload_params": True})
    # Megatron splits layers over TP and PP; the FSDP backends (verl) only add Ulysses context parallelism.
    limits = {"tp": MAX_HINT_TP, "pp": arch.num_hidden_layers, "cp": arch.num_attention_heads}
    for name in ("tp", "pp", "cp") if layout.backend == "megatron" else ("cp",):
        degree = getattr(layout, name) * 2
        while degree <= limits[name] and _divides(name, degree, arch, layout):
            options.append({name: degree})
            degree *= 2
    return options


def _divides(name: str, degree: int, arch: Architecture, layout: TrainingPlacement) -> bool:
    """Whether a parallel degree satisfies the config checks' shape constraints."""
    if name == "tp":
        return arch.num_key_value_heads % degree == 0 and arch.num_attention_heads % degree == 0
    if name == "pp":
        return arch.num_hidden_layers % (degree * layout.virtual_pipeline_stages) == 0
    return (arch.num_attention_heads // layout.tp) % degree == 0


# ---------------------------------------------------------------------------------------------------- rollout role


def resident_reference(scenario: Scenario) -> bool:
    """Whether a frozen reference policy occupies the training GPUs with the actor's layout (not placed apart)."""
    return (scenario.algorithm.ref_model and scenario.placement.reference is None
            and scenario.placement.training.reference_weights == "resident")


def training_state_beside_engines(scenario: Scenario, spec: ModelSpec, reward_spec: ModelSpec | None = None) -> float:
    """Training state beside a rollout engine on the same GPUs (colocated, or hybrid in the training's pool), with
    the state of roles placed to share the actor's GPUs, which stays resident."""
    placement = scenario.placement
    if placement.mode not in ("colocated", "hybrid") or placement.rollout.pool != placement.training.pool:
        return 0.0
    return resident_training_bytes(spec, training_layout(placement.training),
                                   critic=scenario.algorithm.critic and placement.critic is None,
                                   reference=resident_reference(scenario)) + sum(
        guest_state(scenario, spec, reward_spec, "actor").values())


def _rollout_memory_of(scenario: Scenario, spec: ModelSpec, gpu: GPUProfile,
                       reward_spec: ModelSpec | None = None) -> RoleMemory:
    draft = drafter_spec(scenario, spec)
    return engine_memory(spec, engine_layout(scenario.placement.rollout), gpu.memory_bytes,
                         weight_bytes=engine_weight_bytes(spec, scenario.model.dtype),
                         resident_training_bytes=training_state_beside_engines(scenario, spec, reward_spec),
                         longest_sequence=scenario.algorithm.model_len,
                         drafter=None if draft is None else (draft, engine_weight_bytes(draft, scenario.model.dtype)))


def rollout_memory(scenario: Scenario, spec: ModelSpec, gpu: GPUProfile,
                   reward_spec: ModelSpec | None = None) -> RoleMemory:
    """An engine GPU: weights, workspace and at least one longest sequence's KV inside its gpu_memory_utilization share.

    When that does not fit, the hints are changes (engine TP, memory share, offloading colocated training state) that
    were checked to fit.
    """
    memory = _rollout_memory_of(scenario, spec, gpu, reward_spec)
    if memory.fits:
        return memory
    placement = scenario.placement
    engine, arch = placement.rollout, spec.architecture
    options: list[dict[str, Any]] = []
    tp = engine.tp * 2
    while tp <= engine.gpus and engine.gpus % tp == 0 and arch.num_attention_heads % tp == 0:
        options.append({"rollout.tp": tp})
        tp *= 2
    if engine.gpu_memory_utilization < 0.95:
        options.append({"rollout.gpu_memory_utilization": 0.95})
    if "training state (resident)" in memory.components:
        if placement.mode == "colocated" and placement.training.moved_while_generating != OffloadWhileGenerating(
                weights=True, optimizer=True):
            options.append({"training.offload_while_generating": True})
        if not placement.training.offload_optimizer:
            options.append({"training.offload_optimizer": True})
        if not placement.training.offload_params:
            options.append({"training.offload_params": True})

    def fits(changes: dict[str, Any]) -> float | None:
        candidate = _rollout_memory_of(_with_placement(scenario, changes), spec, gpu, reward_spec)
        return candidate.total_bytes if candidate.fits else None

    hints = _verified_hints("placement", options, fits)
    return RoleMemory(memory.role, memory.pool, memory.capacity_bytes, memory.components,
                      kv_cache_bytes=memory.kv_cache_bytes, notes=memory.notes, hints=hints)


def prefill_memory(scenario: Scenario, spec: ModelSpec, gpu: GPUProfile) -> RoleMemory | None:
    """A prefill engine's GPU (prefill/decode disaggregation): weights, workspace and at least one longest context it
    prefills inside its gpu_memory_utilization share; the rest holds the prompts it prefills and those whose KV cache
    waits to be fetched by a decode engine. None without prefill engines. When it does not fit, the hints are changes
    of its own fields that were checked to fit."""
    layout = prefill_layout(scenario.placement.rollout)
    if layout is None:
        return None
    workload = scenario.workload
    # A later turn of a multi-turn trajectory prefills its whole context there (a new request to the prefill engine).
    longest = (scenario.algorithm.model_len if workload.multiturn is not None or workload.replay is not None
               else scenario.algorithm.max_prompt_tokens + 1)

    def memory_of(candidate: EngineLayout) -> RoleMemory:
        found = engine_memory(spec, candidate, gpu.memory_bytes, weight_bytes=engine_weight_bytes(spec, scenario.model.dtype),
                              resident_training_bytes=0.0, longest_sequence=longest)
        return replace(found, role="prefill")

    memory = memory_of(layout)
    if memory.fits:
        return memory
    options: list[dict[str, Any]] = []
    tp = layout.tp * 2
    while tp <= layout.gpus and layout.gpus % tp == 0 and spec.architecture.num_attention_heads % tp == 0:
        options.append({"tp": tp})
        tp *= 2
    if layout.gpu_memory_utilization < 0.95:
        options.append({"gpu_memory_utilization": 0.95})
    tokens = layout.max_num_batched_tokens // 2
    while tokens >= MIN_HINT_MICRO_BATCH_TOKENS:
        options.append({"max_num_batched_tokens": tokens})
        tokens //= 2

    def fits(changes: dict[str, Any]) -> float | None:
        candidate = memory_of(replace(layout, **changes))
        return candidate.total_bytes if candidate.fits else None

    return replace(memory, hints=_verified_hints("placement.rollout.prefill", options, fits))


def _with_placement(scenario: Scenario, changes: dict[str, Any]) -> Scenario:
    """The scenario with `section.field` placement changes applied (no re-validation: only for re-evaluating memory)."""
    placement = scenario.placement
    sections: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    updated = {name: getattr(placement, name).model_copy(update=fields) for name, fields in sections.items()}
    return scenario.model_copy(update={"placement": placement.model_copy(update=updated)})


# ---------------------------------------------------------------------------------------------------- role groups


def group_memories(scenario: Scenario, spec: ModelSpec, gpus: dict[str, GPUProfile],
                   reward_spec: ModelSpec | None) -> list[RoleMemory]:
    """A GPU of each group the critic, the reference or a reward model has of its own, with the roles that share it;
    for a critic's or reference's group that does not fit, layout changes that were checked to fit."""
    found = []
    for group in ("critic", "reference", "reward_model"):
        if group not in roles_on(scenario, group):
            continue  # not placed on GPUs of its own
        placed = getattr(scenario.placement, group)
        capacity = gpus[placed.pool or ""].memory_bytes
        memory = group_memory_of(scenario, spec, reward_spec, group, capacity)
        if not memory.fits and group != "reward_model":
            gpu_count = placed.gpus

            def fits(changes: dict[str, Any], placed=placed, gpu_count=gpu_count, group=group,
                     capacity=capacity) -> float | None:
                model_parallel = changes.get("tp", placed.tp) * changes.get("pp", placed.pp) * changes.get("cp", placed.cp)
                if gpu_count % model_parallel:
                    return None
                candidate = placed.model_copy(update={**changes, "dp": gpu_count // model_parallel})
                trial = group_memory_of(scenario, spec, reward_spec, group, capacity, training_layout(candidate))
                return trial.total_bytes if trial.fits else None

            hints = _verified_hints(f"placement.{group}",
                                    _training_options(spec, placed, scenario.algorithm.model_len), fits)
            memory = RoleMemory(memory.role, memory.pool, memory.capacity_bytes, memory.components,
                                notes=memory.notes, hints=hints)
        elif not memory.fits:
            memory = RoleMemory(memory.role, memory.pool, memory.capacity_bytes, memory.components, notes=memory.notes,
                                hints=("more tensor parallelism (placement.reward_model.tp), or GPUs with more memory",))
        found.append(memory)
    return found


# ---------------------------------------------------------------------------------------------------- hints


def _verified_hints(
    prefix: str, options: list[dict[str, Any]], fits: Callable[[dict[str, Any]], float | None]
) -> tuple[str, ...]:
    """Each single option that fits; if none does, the smallest greedy combination of options (in order) that fits.

    `fits` re-evaluates the memory with the changes applied and returns the bytes needed, or None when it still does not fit.
    """
    hints = []
    answered: set[str] = set()
    for changes in options:
        key = next(iter(changes))
        if key in answered:
            continue  # the mildest change of a field that fits is enough (largest micro-batch, smallest degree)
        needed = fits(changes)
        if needed is not None:
            answered.add(key)
            hints.append(f"{_describe(prefix, changes)} ({needed / GIB:.1f} GiB)")
    if hints:
        return tuple(hints)
    chosen: list[dict[str, Any]] = []
    for changes in options:
        chosen.append(changes)
        if fits(_merge(chosen)) is not None:
            # Drop the options the combination does not need, last-added kept.
            for option in list(chosen[:-1]):
                trial = [o for o in chosen if o is not option]
                if fits(_merge(trial)) is not None:
                    chosen = trial
            merged = _merge(chosen)
            needed = fits(merged)
            assert needed is not None
            return (f"{_describe(prefix, merged)} together ({needed / GIB:.1f} GiB)",)
    return ("more GPUs, or GPUs with more memory (no change of ZeRO stage, recompute, micro-batch size, offload or "
            "parallelism fits, alone or together)",)


def _merge(options: list[dict[str, Any]]) -> dict[str, Any]:
    """One set of changes; a later option of the same field (a smaller micro-batch, a larger degree) wins."""
    merged: dict[str, Any] = {}
    for option in options:
        merged.update(option)
    return merged


def _describe(prefix: str, changes: dict[str, Any]) -> str:
    return " + ".join(f"{prefix}.{key}: {_yaml(value)}" for key, value in changes.items())


def _yaml(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def memory_report(scenario: Scenario, spec: ModelSpec, gpus: dict[str, GPUProfile],
                  reward_spec: ModelSpec | None = None) -> list[RoleMemory]:
    """Per-GPU memory of each GPU role in the scenario, then of each GPU group of the critic, the reference or a
    reward model placed apart from the actor (rlsim.pricing.role_memory), then of the prefill engines of a
    prefill/decode-disaggregated rollout; `gpus` maps pool name to its GPU profile,
    `reward_spec` is the reward model's (bound.reward_model)."""
    placement = scenario.placement
    prefill = placement.rollout.prefill
    prefilling = prefill_memory(scenario, spec, gpus[prefill.pool or ""]) if prefill is not None else None
    return [
        rollout_memory(scenario, spec, gpus[placement.rollout.pool or ""], reward_spec),
        training_memory(scenario, spec, gpus[placement.training.pool or ""], reward_spec),
        *group_memories(scenario, spec, gpus, reward_spec),
        *([prefilling] if prefilling is not None else []),
    ]
