"""What the metrics need to know about a run beyond its event log: the cluster's pools (GPU index ranges, peak rates,
prices), the model's FLOP and byte coefficients and the rollout engines' shape. Plain data taken from the resolved
scenario once, so every metric stays a pure function of (EventLog, RunFacts)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsim.config.agents import agent_scenario
from rlsim.config.bound import Bound, bind
from rlsim.config.run_length import fill_steps
from rlsim.costs.memory import kv_bytes_per_token_per_gpu
from rlsim.metrics.long_run import LongRunFacts
from rlsim.models import ModelSpec
from rlsim.pricing.engines import engine_costs, free_collective, policy_kv_tokens
from rlsim.pricing.layouts import engine_layout


@dataclass(frozen=True)
class PoolFacts:
    """A pool's GPUs are indices [first_gpu, first_gpu + gpus) of the event log, in scenario order."""

    name: str
    gpu: str
    first_gpu: int
    gpus: int
    peak_bf16_flops: float
    hbm_bytes_per_s: float
    price_usd_per_gpu_hour: float | None

    def overlap(self, first_gpu: int, gpu_count: int) -> int:
        """How many of GPUs [first_gpu, first_gpu + gpu_count) are in this pool."""
        return max(0, min(first_gpu + gpu_count, self.first_gpu + self.gpus) - max(first_gpu, self.first_gpu))


@dataclass(frozen=True)
class FlopModel:
    """Model FLOPs of a forward pass, as `ModelSpec.forward_flops` counts them (2 per multiply-accumulate of the weight
    matrices, plus attention scores and weighted values), in a form that sums over many sequences at once."""

    matmul_flops_per_token: float  # 2 · active weight-matrix parameters (output head included)
    attention_flops_per_key: float  # per query per key it attends to, all layers
    lm_head_flops_per_token: float

    @classmethod
    def of(cls, spec: ModelSpec) -> FlopModel:
        return cls(2.0 * spec.active_matmul_params, float(spec.attention_flops_per_context_token),
                   float(spec.lm_head_flops_per_token))

    def forward(self, tokens: np.ndarray, context: np.ndarray | float = 0.0, *, lm_head: bool = True) -> float:
        """Summed forward FLOPs of sequences of `tokens` new causal tokens after `context` cached ones each."""
        tokens = np.asarray(tokens, dtype=np.float64)
        keys_seen = tokens * context + tokens * (tokens + 1) / 2
        per_token = self.matmul_flops_per_token - (0.0 if lm_head else self.lm_head_flops_per_token)
        return float(per_token * tokens.sum() + self.attention_flops_per_key * keys_seen.sum())


@dataclass(frozen=True)
class RunFacts:
    scenario: str
    gpus: int
    pools: tuple[PoolFacts, ...]
    warmup_steps: int
    placement: str  # colocated, disaggregated, hybrid
    schedule: str
    policy: FlopModel
    reward_model: FlopModel | None  # a reward model scoring on GPUs, when the scenario has one
    ref_model: bool
    critic: bool
    ppo_epochs: int
    recompute_old_log_prob: bool
    rollout_pool: str
    training_pool: str
    engines: int  # rollout engines
    engine_gpus: int  # GPUs per rollout engine (its TP·EP group)
    max_num_seqs: int
    kv_capacity_tokens: int  # per engine
    kv_bytes_per_token: float  # per engine, all its GPUs together
    # Weight bytes a decode iteration of a batch of b sequences reads, all the engine's GPUs together, for b = 1, 2, …
    # (the cost model's `weight_bytes_read`: every weight once, an MoE layer only the experts its tokens touch);
    # batches past the end read the last entry's.
    decode_weight_bytes: tuple[float, ...]
    # Steps the schedule's pipeline takes to fill (rlsim.config.run_length): a warm-up shorter than this measures the fill.
    pipeline_fill_steps: int = 0
    # With run.horizon: what the long run pays besides its steps (failures, restarts, checkpoints, evaluation).
    long_run: LongRunFacts | None = None
    # A multi-agent run's agents, each by name with the facts of its own model and placement (scenario agents:).
    agents: tuple[tuple[str, RunFacts], ...] = ()

    @classmethod
    def from_bound(cls, bound: Bound) -> RunFacts:
        scenario, spec = bound.scenario, bound.model
        pools, first = [], 0
        for pool in scenario.cluster.pools:
            gpu = bound.pools[pool.name].gpu
            pools.append(PoolFacts(pool.name, gpu.name, first, pool.gpus, gpu.peak_flops("bf16"), gpu.hbm_bytes_per_s,
                                   pool.price_usd_per_gpu_hour))
            first += pool.gpus
        placement, algorithm = scenario.placement, scenario.algorithm
        engine = engine_layout(placement.rollout)
        kv_per_gpu = kv_bytes_per_token_per_gpu(spec, engine.tp)
        reward_spec = bound.reward_model if scenario.workload.reward.kind == "reward_model" else None
        return cls(
            scenario=scenario.name,
            gpus=first,
            pools=tuple(pools),
            warmup_steps=bound.run.warmup_steps,
            placement=placement.mode,
            schedule=scenario.schedule.mode,
            policy=FlopModel.of(spec),
            reward_model=FlopModel.of(reward_spec) if reward_spec is not None else None,
            ref_model=algorithm.ref_model,
            critic=algorithm.critic,
            ppo_epochs=algorithm.ppo_epochs,
            recompute_old_log_prob=algorithm.recompute_old_log_prob,
            rollout_pool=engine.pool,
            training_pool=placement.training.pool or pools[0].name,
            engines=engine.engines,
            engine_gpus=engine.tp,
            max_num_seqs=engine.max_num_seqs,
            # The same budget the engines are built with (rlsim.sim.build).
            kv_capacity_tokens=policy_kv_tokens(bound),
            kv_bytes_per_token=kv_per_gpu * engine.tp,
            decode_weight_bytes=decode_weight_bytes(bound),
            pipeline_fill_steps=fill_steps(scenario.schedule),
            long_run=LongRunFacts.from_bound(bound),
            agents=tuple((member.name, cls.from_bound(bind(agent_scenario(scenario, i))))
                         for i, member in enumerate(scenario.agents.members)) if scenario.agents else (),
        )

    def weight_bytes(self, batch: np.ndarray) -> np.ndarray:
        """Weight bytes one decode iteration of each batch size reads (batch >= 1)."""
        table = np.asarray(self.decode_weight_bytes, dtype=np.float64)
        return table[np.clip(np.asarray(batch, dtype=np.int64), 1, table.size) - 1]

    def pool(self, name: str) -> PoolFacts:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def pool_of_gpu(self, gpu: int) -> PoolFacts:
        for pool in self.pools:
            if pool.first_gpu <= gpu < pool.first_gpu + pool.gpus:
                return pool
        raise IndexError(f"GPU {gpu} is outside the cluster's {self.gpus} GPUs")


def decode_weight_bytes(bound: Bound) -> tuple[float, ...]:
    """`RunFacts.decode_weight_bytes` of the scenario's rollout engines, as the simulator prices them: up to the batch
    from which it stops growing (at once for a dense model; once every expert is touched for an MoE)."""
    engine = engine_layout(bound.scenario.placement.rollout)
    # The weight bytes a decode reads do not depend on the engine's communication.
    costs = engine_costs(bound, bound.model, engine, None, free_collective)
    table = [costs.weight_bytes_read(1) * engine.tp]
    for batch in range(2, engine.max_num_seqs + 1):
        nbytes = costs.weight_bytes_read(batch) * engine.tp
        if nbytes == table[-1]:
            break
        table.append(nbytes)
    return tuple(table)
