"""Assemble a simulation from a bound scenario: GPU indices of every role, rollout engines with their cost models and
KV budgets, the trainer with actor/critic costs, the reward stage (CPU pool, reward model, or LLM-judge engines), the
workload's group sampler, and weight-sync / switching costs."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
import simpy

from rlsim.config.bound import Bound
from rlsim.costs.collectives import collective_time
from rlsim.costs.engine_kernels import CollectiveSeconds
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memory import engine_kv_tokens, require_all
from rlsim.costs.training import GroupCollectives, TrainingCosts, training_rates
from rlsim.costs.weight_sync import SwitchCost, WeightSyncCost
from rlsim.pricing.disaggregation import kv_transfer_seconds, prefill_costs, prefill_kv_tokens
from rlsim.pricing.engines import engine_costs, judge_kv_tokens
from rlsim.pricing.layouts import JudgeRole, RewardModelRole, padded_prompt_tokens, roles
from rlsim.pricing.memory import memory_report
from rlsim.pricing.weight_sync import colocated_switch_for, disaggregated_sync_for, reference_load_seconds, role_gpus
from rlsim.sim.engines import GenerationEngine
from rlsim.sim.environments import tool_calls_for
from rlsim.sim.prefill import PrefillEngine, PrefillRouter
from rlsim.sim.recorder import Recorder
from rlsim.sim.reward import RewardPool
from rlsim.sim.role_groups import ROLES, RoleGroups
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from rlsim.sim.static_batch import StaticBatchEngine
from rlsim.sim.trainer import Trainer, TrainingGroup
from rlsim.topology import GPU, ClusterTopology, CommGroup
from rlsim.workload.batches import GroupSampler


@dataclass
class Simulation:
    """Everything the RL loop drives. Built per run; nothing in it is shared between runs."""

    env: simpy.Environment
    bound: Bound
    recorder: Recorder
    engines: list[GenerationEngine]
    rollout_gpus: tuple[int, int]  # first GPU index and count
    training: TrainingGroup
    trainer: Trainer
    actor: TrainingCosts
    critic: TrainingCosts | None
    critic_trainer: Trainer  # the actor's trainer unless the critic is placed with a layout of its own
    reference: TrainingCosts  # the reference pass: the actor's costs unless the reference is placed apart
    reference_trainer: Trainer
    groups: RoleGroups  # GPU groups of the actor, critic, reference and reward model, with their locks
    reward: RewardPool | None
    reward_model: tuple[Trainer, TrainingCosts] | None
    judges: list[RolloutEngine]  # LLM-judge engines (workload.reward.kind llm_judge), else empty
    reference_load_s: float  # per reference pass: the reference policy's weights onto the training GPUs
    switch: SwitchCost | None  # colocated: per train <-> generate cycle
    sync: WeightSyncCost | None  # disaggregated / hybrid: per weight update
    sampler: GroupSampler
    balancer_rng: np.random.Generator
    reward_rng: np.random.Generator  # the judge's verdict lengths
    remedy_rng: np.random.Generator  # a long-tail remedy's own draws (DUET's aborts)
    # Prefill/decode disaggregation: the prefill engines (`engines` then decode) and their GPUs; none without.
    prefill_engines: list[PrefillEngine] = field(default_factory=list)
    prefill_gpus: tuple[int, int] | None = None

    @property
    def rollout_engines(self) -> list[RolloutEngine | StaticBatchEngine]:
        """Every engine that runs the policy's generation, which pauses for and takes each weight update: the
        engines, and the prefill engines that feed them."""
        return [*self.engines, *self.prefill_engines]


def build(bound: Bound, *, mode: str = "fast", env: simpy.Environment | None = None, recorder: Recorder | None = None,
          unit_suffix: str = "") -> Simulation:
    """The simulation of `bound`; a multi-agent run builds each agent's into one `env` and `recorder`, its engines'
    and ranks' units marked with `unit_suffix` (engine0:coder), each on the cluster GPUs its placement names."""
    scenario, spec = bound.scenario, bound.model
    placement = scenario.placement
    # A role that does not fit would not start on real GPUs (vLLM refuses a KV cache shorter than one longest
    # sequence; training runs out of memory): say which, and what would fit, instead of simulating it.
    memory = memory_report(scenario, spec, {name: hw.gpu for name, hw in bound.pools.items()}, bound.reward_model)
    require_all(memory)
    rollout_fit = memory[0]
    env = env or simpy.Environment()
    topology = ClusterTopology.build(bound)
    index = {gpu: i for i, gpu in enumerate(g for pool in topology.pools for g in topology.gpus(pool))}
    recorder = recorder or Recorder(len(index))
    placed = roles(bound)
    gpus = role_gpus(bound, topology, placed)
    rollout, training = gpus.rollout, gpus.training
    # One independent stream per component, so adding randomness to one never shifts another's draws (a child's
    # stream depends only on its index, so a stream added at the end leaves the earlier ones as they were).
    (workload_seed, balancer_seed, reward_seed, filter_seed, step_scale_seed, environment_seed,
     remedy_seed) = np.random.SeedSequence(scenario.seed).spawn(7)

    engine_layout = placed.rollout
    kv_tokens = engine_kv_tokens(rollout_fit, spec, engine_layout.tp)
    # Engines of one placement are identical: one cost model (and its cached decode profiles) serves them all. Their
    # TP groups have the same shape, so the first engine's communicator prices every engine's collectives.
    costs = engine_costs(bound, spec, engine_layout, topology.group(rollout[:engine_layout.tp]), _memoised)
    engines: list[GenerationEngine] = []
    for e in range(engine_layout.engines):
        mine = rollout[e * engine_layout.tp:(e + 1) * engine_layout.tp]
        if engine_layout.engine == "hf":
            engines.append(StaticBatchEngine(env, e, costs, kv_tokens, engine_layout.max_num_seqs,
                                             scenario.algorithm.max_response_tokens, index[mine[0]], len(mine),
                                             recorder, _not_connected, mode=mode,
                                             padded_prompt=padded_prompt_tokens(scenario), unit=f"engine{e}{unit_suffix}"))
            continue
        engines.append(RolloutEngine(env, e, costs, kv_tokens, engine_layout.max_num_seqs,
                                     engine_layout.max_num_batched_tokens, index[mine[0]], len(mine), recorder,
                                     _not_connected, mode=mode, tool_wait=scenario.workload.tool_wait,
                                     admission=scenario.placement.rollout.admission,
                                     order=scenario.placement.rollout.scheduling_policy, unit=f"engine{e}{unit_suffix}"))

    prefill_engines = _prefill_engines(env, bound, topology, index, recorder, gpus.prefill, rollout, engines, mode)
    tool_calls = tool_calls_for(env, recorder, scenario.workload.environments, np.random.default_rng(environment_seed))
    for engine in engines:
        engine.environment = tool_calls

    layout = placed.training
    group = TrainingGroup(index[training[0]], layout)
    sustained = training_rates(bound.gpu(layout.pool), scenario.framework.kernel_efficiency(layout.backend))
    collectives = GroupCollectives.on_cluster(topology, training, layout)
    actor = TrainingCosts(spec, sustained, layout, collectives)
    critic = TrainingCosts(spec, sustained, layout, collectives, head="value") if scenario.algorithm.critic else None
    trainer = Trainer(env, recorder, group, scenario.schedule.dp_balance, unit_suffix=unit_suffix)
    critic_trainer, reference_trainer, reference = trainer, trainer, actor
    if placed.critic is not None and critic is not None:
        critic_trainer, critic = _placed_role(env, bound, placed.critic, topology, index, recorder, gpus.critic,
                                              "critic", unit_suffix, head="value")
    if placed.reference is not None:
        reference_trainer, reference = _placed_role(env, bound, placed.reference, topology, index, recorder,
                                                    gpus.reference, "ref", unit_suffix)
    ranges = {"actor": (index[training[0]], len(training))}
    for role, own in (("critic", gpus.critic), ("reference", gpus.reference), ("reward_model", gpus.reward)):
        if own and placed.group_of(role) == role:
            ranges[role] = (index[own[0]], len(own))
    used = {"actor": True, "critic": scenario.algorithm.critic, "reference": scenario.algorithm.ref_model,
            "reward_model": isinstance(placed.reward, RewardModelRole)}
    groups = RoleGroups(env, ranges, {role: placed.group_of(role) for role in ROLES if used[role]})

    reward_config = scenario.workload.reward
    reward_rng = np.random.default_rng(reward_seed)
    reward = RewardPool(env, reward_config, reward_rng) if reward_config.kind in ("rule", "sandbox") else None
    reward_model = None
    judges: list[RolloutEngine] = []
    if isinstance(placed.reward, RewardModelRole):
        reward_model = _reward_model(env, bound, placed.reward, topology, index, recorder, gpus.reward)
    elif isinstance(placed.reward, JudgeRole):
        judges = _judges(env, bound, placed.reward, topology, index, recorder, gpus.reward, mode)

    switch = colocated_switch_for(bound, topology) if placement.mode == "colocated" else None
    sync = disaggregated_sync_for(bound, topology) if placement.mode != "colocated" else None
    sampler = GroupSampler(scenario.workload, scenario.algorithm, np.random.default_rng(workload_seed),
                           np.random.default_rng(filter_seed), int(step_scale_seed.generate_state(1)[0]))
    return Simulation(env, bound, recorder, engines, (index[rollout[0]], len(rollout)), group, trainer, actor, critic,
                      critic_trainer, reference, reference_trainer, groups,
                      reward, reward_model, judges, reference_load_seconds(bound, topology), switch, sync, sampler,
                      np.random.default_rng(balancer_seed), reward_rng, np.random.default_rng(remedy_seed),
                      prefill_engines,
                      (index[gpus.prefill[0]], len(gpus.prefill)) if gpus.prefill else None)


def _prefill_engines(env: simpy.Environment, bound: Bound, topology: ClusterTopology, index: dict[GPU, int],
                     recorder: Recorder, gpus: tuple[GPU, ...], decode_gpus: tuple[GPU, ...],
                     decode: list[GenerationEngine], mode: str) -> list[PrefillEngine]:
    """Prefill/decode disaggregation: prefill engines on their GPUs (named `prefill0`, …), routed to by every decode
    engine, which then fetches the KV caches over the links between them; none without `placement.rollout.prefill`."""
    prefill = bound.scenario.placement.rollout.prefill
    if prefill is None:
        return []
    costs = prefill_costs(bound, topology, gpus, _memoised)
    kv_tokens = prefill_kv_tokens(bound)
    # Recorded first, so every later context (a weight update, the staleness bound, the trainer's wait) wins over it:
    # a prefill engine with nothing to prefill while the decode engines generate is done with its share of the work.
    recorder.context(index[gpus[0]], len(gpus), 0.0, math.inf, "tail", "gen")
    engines = []
    for e in range(prefill.engines):
        mine = gpus[e * prefill.tp:(e + 1) * prefill.tp]
        engines.append(PrefillEngine(env, e, costs, kv_tokens, prefill.max_num_seqs, prefill.max_num_batched_tokens,
                                     index[mine[0]], len(mine), recorder, mode=mode))
    decode_tp = bound.scenario.placement.rollout.tp
    seconds = kv_transfer_seconds(
        bound, topology, [gpus[e * prefill.tp:(e + 1) * prefill.tp] for e in range(prefill.engines)],
        [decode_gpus[e * decode_tp:(e + 1) * decode_tp] for e in range(len(decode))])
    router = PrefillRouter(engines, seconds, bound.model.kv_bytes_per_token, recorder)
    for engine in decode:
        assert isinstance(engine, RolloutEngine), "the config checks refuse HF engines with prefill engines"
        engine.take_prefills_from(router)
    return engines


def _not_connected(rollout: Rollout) -> None:
    """An engine's `on_finish` until the run's controller connects it (rlsim.sim.groups): nothing finishes before."""
    raise RuntimeError(f"rollout {rollout.seq_id} finished before a controller took the engines (a bug in rlsim)")


def _memoised(op: str, group: CommGroup) -> CollectiveSeconds:
    """Seconds of `op` on `group` by message size, remembered: engines ask for the same few sizes every iteration."""

    @lru_cache(maxsize=4096)
    def seconds(nbytes: float) -> float:
        return collective_time(op, nbytes, group).seconds

    return seconds


def _placed_role(env, bound: Bound, layout: TrainingLayout, topology: ClusterTopology, index: dict[GPU, int],
                 recorder: Recorder, gpus: tuple[GPU, ...], unit_prefix: str, unit_suffix: str,
                 head: Literal["lm", "value"] = "lm") -> tuple[Trainer, TrainingCosts]:
    """The critic or reference policy with a layout of its own, on its GPUs (its own, or those of the role it
    shares); its ranks are named `critic0`, … or `ref0`, …."""
    scenario = bound.scenario
    rates = training_rates(bound.gpu(layout.pool), scenario.framework.kernel_efficiency(layout.backend))
    costs = TrainingCosts(bound.model, rates, layout, GroupCollectives.on_cluster(topology, gpus, layout), head=head)
    trainer = Trainer(env, recorder, TrainingGroup(index[gpus[0]], layout), scenario.schedule.dp_balance,
                      unit_prefix=unit_prefix, unit_suffix=unit_suffix)
    return trainer, costs


def _reward_model(env, bound: Bound, role: RewardModelRole, topology: ClusterTopology, index: dict[GPU, int],
                  recorder: Recorder, gpus: tuple[GPU, ...]) -> tuple[Trainer, TrainingCosts]:
    """A reward model scoring with forward passes on its own GPUs, after the policy's roles in its pool; its ranks
    are named `rm0`, `rm1`, … (the policy's training ranks are `dp…`)."""
    scenario, layout = bound.scenario, role.layout
    rates = training_rates(bound.gpu(layout.pool), scenario.framework.kernel_efficiency(layout.backend))
    costs = TrainingCosts(role.spec, rates, layout, GroupCollectives.on_cluster(topology, gpus, layout), head="value")
    trainer = Trainer(env, recorder, TrainingGroup(index[gpus[0]], layout), scenario.schedule.dp_balance,
                      unit_prefix="rm")
    return trainer, costs


def _judges(env, bound: Bound, role: JudgeRole, topology: ClusterTopology, index: dict[GPU, int], recorder: Recorder,
            gpus: tuple[GPU, ...], mode: str) -> list[RolloutEngine]:
    """LLM-judge generation engines on the reward GPUs (after the policy's roles in their pool), named `judge0`,
    `judge1`, …; their busy time is reward work (`reward_model`, stage `reward`)."""
    layout = role.layout
    kv_tokens = judge_kv_tokens(bound, layout)
    costs = engine_costs(bound, role.spec, layout, topology.group(gpus[:layout.tp]), _memoised, policy=False)
    engines = []
    for e in range(layout.engines):
        mine = gpus[e * layout.tp:(e + 1) * layout.tp]
        engines.append(RolloutEngine(env, e, costs, kv_tokens, layout.max_num_seqs, layout.max_num_batched_tokens,
                                     index[mine[0]], len(mine), recorder, _not_connected, mode=mode,
                                     busy_labels=("reward_model", "reward_model", "reward"), unit=f"judge{e}"))
    return engines
