"""Assemble a simulation from a bound scenario: GPU indices of every role, rollout engines with their cost models and
KV budgets, the trainer with actor/critic costs, the reward stage, and weight-sync / switching costs."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import simpy

from rlsim.config.bound import Bound
from rlsim.config.schema import TrainingPlacement
from rlsim.costs.collectives import collective_time
from rlsim.costs.compute import GPURates
from rlsim.costs.memory import kv_bytes_per_token_per_gpu, rollout_memory
from rlsim.costs.rollout import EngineCosts
from rlsim.costs.training import GroupCollectives, TrainingCosts
from rlsim.costs.weight_sync import SwitchCost, WeightSyncCost, colocated_switch_for, disaggregated_sync_for, role_gpus
from rlsim.models import ModelCatalog
from rlsim.sim.recorder import Recorder
from rlsim.sim.reward import RewardPool
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from rlsim.sim.trainer import Trainer, TrainingGroup
from rlsim.topology import GPU, ClusterTopology, CommGroup
from rlsim.workload.batches import GroupSampler


@dataclass
class Simulation:
    """Everything the RL loop drives. Built per run; nothing in it is shared between runs."""

    env: simpy.Environment
    bound: Bound
    recorder: Recorder
    engines: list[RolloutEngine]
    rollout_gpus: tuple[int, int]  # first GPU index and count
    training: TrainingGroup
    trainer: Trainer
    actor: TrainingCosts
    critic: TrainingCosts | None
    reward: RewardPool | None
    reward_model: tuple[Trainer, TrainingCosts] | None
    switch: SwitchCost | None  # colocated: per train <-> generate cycle
    sync: WeightSyncCost | None  # disaggregated / hybrid: per weight update
    sampler: GroupSampler
    balancer_rng: np.random.Generator
    filter_rng: np.random.Generator  # which groups dynamic sampling keeps
    finished: list[Rollout]


def build(bound: Bound, *, mode: str = "fast") -> Simulation:
    scenario, spec = bound.scenario, bound.model
    placement = scenario.placement
    env = simpy.Environment()
    topology = ClusterTopology.build(bound)
    index = {gpu: i for i, gpu in enumerate(g for pool in topology.pools for g in topology.gpus(pool))}
    recorder = Recorder(len(index))
    rollout, training = role_gpus(bound, topology)
    # One independent stream per component, so adding randomness to one never shifts another's draws.
    workload_seed, balancer_seed, reward_seed, filter_seed = np.random.SeedSequence(scenario.seed).spawn(4)
    finished: list[Rollout] = []

    engine_layout = placement.rollout
    gpu = bound.gpu(engine_layout.pool)
    rates = GPURates.from_profile(gpu, scenario.model.dtype)
    kv_tokens = int(rollout_memory(scenario, spec, gpu).kv_cache_bytes
                    // kv_bytes_per_token_per_gpu(spec, engine_layout.tp))
    # Engines of one placement are identical: one cost model (and its cached decode profiles) serves them all. Their
    # TP groups have the same shape, so the first engine's communicator prices every engine's collectives.
    first_group = topology.group(rollout[:engine_layout.tp])
    costs = EngineCosts.for_placement(
        spec, rates, engine_layout,
        _memoised("all_reduce", first_group) if engine_layout.tp > 1 else None,
        _memoised("all_to_all", first_group) if engine_layout.ep > 1 else None,
    )
    engines = []
    for e in range(engine_layout.engines):
        gpus = rollout[e * engine_layout.tp:(e + 1) * engine_layout.tp]
        engines.append(RolloutEngine(env, e, costs, kv_tokens, engine_layout.max_num_seqs,
                                     engine_layout.max_num_batched_tokens, index[gpus[0]], len(gpus), recorder,
                                     finished.append, mode=mode))

    layout = placement.training
    group = TrainingGroup(index[training[0]], layout)
    training_rates = GPURates.from_profile(bound.gpu(layout.pool), "bf16")
    collectives = GroupCollectives.on_cluster(topology, training, layout)
    actor = TrainingCosts(spec, training_rates, layout, collectives)
    critic = TrainingCosts(spec, training_rates, layout, collectives, head="value") if scenario.algorithm.critic else None
    trainer = Trainer(env, recorder, group, scenario.schedule.dp_balance)

    reward_config = scenario.workload.reward
    reward_rng = np.random.default_rng(reward_seed)
    reward = RewardPool(env, reward_config, reward_rng) if reward_config.kind != "reward_model" else None
    reward_model = None
    if reward_config.kind == "reward_model":
        reward_model = _reward_model(env, bound, topology, index, recorder, rollout, training)

    switch = colocated_switch_for(bound, topology) if placement.mode == "colocated" else None
    sync = disaggregated_sync_for(bound, topology) if placement.mode != "colocated" else None
    return Simulation(env, bound, recorder, engines, (index[rollout[0]], len(rollout)), group, trainer, actor, critic,
                      reward, reward_model, switch, sync, GroupSampler(scenario, np.random.default_rng(workload_seed)),
                      np.random.default_rng(balancer_seed), np.random.default_rng(filter_seed), finished)


def _memoised(op: str, group: CommGroup):
    """Seconds of `op` on `group` by message size, remembered: engines ask for the same few sizes every iteration."""

    @lru_cache(maxsize=4096)
    def seconds(nbytes: float) -> float:
        return collective_time(op, nbytes, group).seconds

    return seconds


def _reward_model(env, bound: Bound, topology: ClusterTopology, index: dict[GPU, int], recorder: Recorder,
                  rollout: tuple[GPU, ...], training: tuple[GPU, ...]) -> tuple[Trainer, TrainingCosts]:
    """A reward model scoring with forward passes on its own GPUs, after the policy's roles in its pool."""
    scenario = bound.scenario
    placement = scenario.placement.reward_model
    assert placement is not None and placement.pool is not None
    used = {g for g in rollout + training if g.pool == placement.pool}
    gpus = topology.allocate(placement.pool, placement.gpus, len(used))
    layout = TrainingPlacement(pool=placement.pool, gpus=placement.gpus, tp=placement.tp,
                               dp=placement.gpus // placement.tp, zero_stage=0, activation_recompute="none")
    spec = ModelCatalog.load().spec(scenario.workload.reward.model)
    costs = TrainingCosts(spec, GPURates.from_profile(bound.gpu(placement.pool), "bf16"), layout,
                          GroupCollectives.on_cluster(topology, gpus, layout), head="value")
    trainer = Trainer(env, recorder, TrainingGroup(index[gpus[0]], layout), scenario.schedule.dp_balance)
    return trainer, costs
