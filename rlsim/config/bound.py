"""A resolved scenario bound to the objects its names refer to: the model's derived sizes, the reward model's or
judge's, and each pool's hardware."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlsim.config.framework import Framework
from rlsim.config.run_length import RunLength
from rlsim.config.schema import Pool, Scenario
from rlsim.hardware import GPUProfile, HardwareCatalog, Interconnect
from rlsim.models import ModelCatalog, ModelSpec
from rlsim.models.spec import KV_CACHE_DTYPE_BYTES


@dataclass(frozen=True)
class PoolHardware:
    pool: Pool
    gpu: GPUProfile
    intra_node: Interconnect
    inter_node: Interconnect | None  # None: single-node pool of GPUs without a scale-out network
    host_link: Interconnect


@dataclass(frozen=True)
class Bound:
    scenario: Scenario
    model: ModelSpec
    pools: dict[str, PoolHardware]
    run: RunLength  # steps simulated and warm-up, resolved (run.steps and run.warmup_steps are set by load_scenario)
    reward_model: ModelSpec | None = None  # the reward model or LLM judge workload.reward names, else None

    def gpu(self, pool: str | None) -> GPUProfile:
        return self.pools[pool or self.scenario.cluster.pools[0].name].gpu

    def framework(self, pool: str | None) -> Framework:
        """The scenario's framework overheads for work whose CPU side runs on `pool`'s hosts."""
        node = self.gpu(pool).node
        return self.scenario.framework.on_host(node.dispatch_time_factor, node.python_time_factor)


def pool_hardware(pool: Pool, hardware: HardwareCatalog) -> PoolHardware:
    """The hardware a pool names, its interconnects given (load_scenario resolves them from the GPU's profile); the
    host link is the GPU's."""
    gpu = hardware.gpu(pool.gpu)
    assert pool.intra_node is not None, "load_scenario resolves every pool's interconnects"
    return PoolHardware(
        pool=pool,
        gpu=gpu,
        intra_node=hardware.interconnect(pool.intra_node),
        inter_node=hardware.interconnect(pool.inter_node) if pool.inter_node else None,
        host_link=hardware.interconnect(gpu.node.host_link),
    )


def bind(scenario: Scenario) -> Bound:
    """Look up a resolved scenario's names (load_scenario has already checked that they exist)."""
    hardware = HardwareCatalog.load([Path(d) for d in scenario.cluster.profile_dirs])
    pools = {pool.name: pool_hardware(pool, hardware) for pool in scenario.cluster.pools}
    architecture = scenario.model.architecture
    assert architecture is not None, "load_scenario fills the architecture of catalog models"
    spec = ModelSpec.from_architecture(scenario.model.name, architecture,
                                       kv_dtype_bytes=KV_CACHE_DTYPE_BYTES[scenario.placement.rollout.kv_cache_dtype])
    reward = scenario.workload.reward
    scorer = ModelCatalog.load().spec(reward.model) if reward.kind in ("reward_model", "llm_judge") else None
    run = scenario.run
    if run.steps is None or run.warmup_steps is None:
        raise ValueError("the scenario's run length is not resolved; load scenarios with rlsim.config.load_scenario")
    return Bound(scenario=scenario, model=spec, pools=pools, run=RunLength(run.steps, run.warmup_steps),
                 reward_model=scorer)
