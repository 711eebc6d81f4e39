"""The weight movements of a scenario's placement, priced: new weights pushed to separate engines, the colocated
switch between training and generation, and the reference policy brought onto the training GPUs."""
from __future__ import annotations

from dataclasses import replace

from rlsim.config.bound import Bound
from rlsim.costs.layout import EngineLayout, TrainingLayout
from rlsim.costs.weight_sync import SwitchCost, WeightSyncCost, colocated_switch_of, disaggregated_sync, reference_copy_seconds
from rlsim.pricing.layouts import Roles, roles, weight_export
from rlsim.topology import ClusterTopology, RoleGPUs


def role_gpus(bound: Bound, topology: ClusterTopology, placed: Roles | None = None) -> RoleGPUs:
    """The GPUs of every role, as the placement puts them: a disaggregated placement that keeps both roles in one
    pool gives training the GPUs after the engines'; colocated and hybrid training starts at the pool's first GPU."""
    placed = placed or roles(bound)
    rollout, training = placed.rollout, placed.training

    def own(role: str, layout: TrainingLayout | EngineLayout | None) -> tuple[str, int] | None:
        return (layout.pool, layout.gpus or 0) if layout is not None and placed.group_of(role) == role else None

    separate = bound.scenario.placement.mode == "disaggregated" and training.pool == rollout.pool
    gpus = topology.place_roles(
        (rollout.pool, rollout.gpus), (training.pool, training.gpus),
        own("reward_model", placed.reward.layout if placed.reward is not None else None),
        training_after_rollout=separate, critic=own("critic", placed.critic), reference=own("reference", placed.reference),
        prefill=(placed.prefill.pool, placed.prefill.gpus) if placed.prefill is not None else None)
    # A role without GPUs of its own runs on those of the role it shares (critic and reference: the actor's).
    groups = {"actor": gpus.training, "critic": gpus.critic, "reference": gpus.reference, "reward_model": gpus.reward}
    algorithm = bound.scenario.algorithm
    return replace(gpus, critic=groups[placed.group_of("critic")] if algorithm.critic else (),
                   reference=groups[placed.group_of("reference")] if algorithm.ref_model else (),
                   reward=groups[placed.group_of("reward_model")] if placed.reward is not None else ())


def reference_load_seconds(bound: Bound, topology: ClusterTopology | None = None) -> float:
    """Seconds each reference pass spends bringing the reference policy's weights onto the training GPUs; 0 without
    a reference pass or with a resident reference."""
    if not bound.scenario.algorithm.ref_model or bound.scenario.placement.reference is not None:
        return 0.0  # a placed reference keeps its weights resident on its GPUs
    topology = topology or ClusterTopology.build(bound)
    placed = roles(bound)
    return reference_copy_seconds(bound.model, placed.training, role_gpus(bound, topology, placed).training, topology)


def disaggregated_sync_for(bound: Bound, topology: ClusterTopology | None = None) -> WeightSyncCost:
    """`disaggregated_sync` for a bound scenario: to every rollout GPU when disaggregated, to the dedicated rollout
    GPUs (those that do not train) when hybrid; and to the prefill engines' GPUs, which run the policy too (one
    broadcast reaches both, as NeMo-RL's and verl's collective weight update reaches every engine in its group)."""
    scenario = bound.scenario
    if scenario.placement.mode == "colocated":
        raise ValueError("a colocated placement has no separate rollout GPUs to sync; use colocated_switch_for")
    topology = topology or ClusterTopology.build(bound)
    placed = roles(bound)
    gpus = role_gpus(bound, topology, placed)
    dedicated = tuple(g for g in gpus.rollout if g not in set(gpus.training)) + gpus.prefill
    return disaggregated_sync(bound.model, placed.training, gpus.training, placed.rollout, dedicated,
                              weight_export(scenario.schedule.weight_sync), topology)


def colocated_switch_for(
    bound: Bound, topology: ClusterTopology | None = None, *, save_checkpoint: bool = False,
    storage_bytes_per_s: float | None = None,
) -> SwitchCost:
    """`colocated_switch_of` for a bound scenario, with its framework's pageable copy rates; with `save_checkpoint`
    each GPU also writes its weights and optimizer state at `storage_bytes_per_s`."""
    scenario = bound.scenario
    topology = topology or ClusterTopology.build(bound)
    placed = roles(bound)
    framework = scenario.framework
    return colocated_switch_of(
        bound.model, placed.training, placed.rollout, role_gpus(bound, topology, placed).training,
        weight_export(scenario.schedule.weight_sync), topology,
        pageable_bytes_per_s=(framework.pageable_copy_out_bytes_per_s, framework.pageable_copy_in_bytes_per_s),
        save_checkpoint=save_checkpoint, storage_bytes_per_s=storage_bytes_per_s)
