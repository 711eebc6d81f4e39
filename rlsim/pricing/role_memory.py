"""Memory of the GPU groups the critic, the reference policy and a reward model are placed on: each role's resident
state on a GPU of its group, and the peak of a group apart from the actor's (rlsim.pricing.memory adds the hints).

The critic has the policy's shape (HybridFlow and OpenRLHF initialise it from the policy or reward model of the same
size) and trains with its own Adam state; its value head has one output, so its passes hold no vocabulary logits.
The reference policy and the reward model are frozen: bf16 weights sharded as their layout shards them.
"""
from __future__ import annotations

from dataclasses import replace

from rlsim.config.schema import Scenario
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memory import (
    RoleMemory,
    forward_pass_activation_memory,
    reference_weight_bytes,
    training_memory_of,
    training_model_state,
)
from rlsim.models import ModelCatalog, ModelSpec
from rlsim.pricing.layouts import reward_model_layout, training_layout


def roles_on(scenario: Scenario, group: str) -> list[str]:
    """The critic, reference and reward model placed on `group`'s GPUs: the group's own role first, then those that
    share it; the actor's default companions (critic and reference with its layout) are not listed."""
    placement, algorithm = scenario.placement, scenario.algorithm
    used = {"critic": algorithm.critic and placement.critic is not None,
            "reference": algorithm.ref_model and placement.reference is not None,
            "reward_model": scenario.workload.reward.kind == "reward_model" and placement.reward_model is not None}
    return sorted((role for role, on in used.items() if on and placement.group_of(role) == group),
                  key=lambda role: role != group)


def guest_state(scenario: Scenario, spec: ModelSpec, reward_spec: ModelSpec | None, group: str) -> dict[str, float]:
    """Bytes per GPU of the placed roles that share `group` without being its own role, by component."""
    return {name: value for role in roles_on(scenario, group) if role != group
            for name, value in _resident(scenario, spec, reward_spec, role).items()}


def _resident(scenario: Scenario, spec: ModelSpec, reward_spec: ModelSpec | None, role: str) -> dict[str, float]:
    placement = scenario.placement
    if role == "critic":
        assert placement.critic is not None
        return {"critic": sum(training_model_state(spec, training_layout(placement.critic)).values())}
    if role == "reference":
        assert placement.reference is not None
        return {"reference weights": reference_weight_bytes(spec, training_layout(placement.reference))}
    assert placement.reward_model is not None
    return {"reward model weights": reference_weight_bytes(reward_spec or _reward_spec(scenario),
                                                           reward_model_layout(placement.reward_model))}


def _reward_spec(scenario: Scenario) -> ModelSpec:
    """The reward model the scenario names, as bind() loads it, for callers that priced without it."""
    reward = scenario.workload.reward
    assert reward.kind == "reward_model"
    return ModelCatalog.load().spec(reward.model)


def with_guests(memory: RoleMemory, guests: dict[str, float]) -> RoleMemory:
    if not guests:
        return memory
    return replace(memory, components={**memory.components, **guests},
                   notes=(*memory.notes, "with the roles placed to share these GPUs: " + ", ".join(guests)))


def group_layout(scenario: Scenario, group: str) -> TrainingLayout:
    placement = scenario.placement
    if group == "reward_model":
        assert placement.reward_model is not None
        return reward_model_layout(placement.reward_model)
    placed = placement.critic if group == "critic" else placement.reference
    assert placed is not None
    return training_layout(placed)


def group_memory_of(scenario: Scenario, spec: ModelSpec, reward_spec: ModelSpec | None, group: str,
                    capacity_bytes: float, layout: TrainingLayout | None = None) -> RoleMemory:
    """Peak memory of a GPU of the `group` role's own GPUs (critic, reference or reward_model), with every role
    sharing them; `layout` replaces the group's own layout (to check a hint)."""
    layout = layout or group_layout(scenario, group)
    name = "+".join(roles_on(scenario, group)) or group
    if group == "critic":
        # A value head: no logits over the vocabulary.
        trained = training_memory_of(spec, layout, capacity_bytes, pool=layout.pool)
        components = {key: value for key, value in trained.components.items() if key != "logits"}
        notes = tuple(note for note in trained.notes if "logits" not in note)
    else:
        model = spec if group == "reference" else reward_spec or _reward_spec(scenario)
        acts = forward_pass_activation_memory(model, layout)
        components = {"weights": reference_weight_bytes(model, layout), "activations": acts.activations}
        if group == "reference" and acts.logits:
            components["logits"] = acts.logits
        notes = ("frozen: bf16 weights and one forward pass's activations",)
    return with_guests(RoleMemory(name, layout.pool, capacity_bytes, components, notes=notes),
                       guest_state(scenario, spec, reward_spec, group))
