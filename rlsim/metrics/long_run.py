"""What a long run pays besides its steps, priced once from the resolved scenario: each pool's failure rate, the
restart, the checkpoint's bytes and its save and restore times, and one evaluation pass (`LongRunFacts`). The goodput
model (`rlsim.metrics.goodput`) combines them with the simulated step."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from rlsim.config.bound import Bound
from rlsim.config.long_run import Evaluation, duration_seconds
from rlsim.config.schema import PartialRollout
from rlsim.costs.checkpoint import checkpoint_bytes, nodes_of, storage_seconds
from rlsim.costs.collectives import HOST_LINK_EFFICIENCY
from rlsim.costs.layout import TrainingLayout
from rlsim.errors import Problem, ScenarioError
from rlsim.estimate import estimate_step
from rlsim.metrics.goodput import LongRunTimes, PoolFailures
from rlsim.pricing.layouts import roles

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class CheckpointGroup:
    """The trained roles on one GPU group and their checkpoint: they write and read it over the group's nodes."""

    roles: tuple[str, ...]
    nbytes: float
    gpus: int
    nodes: int
    write_s: float
    read_s: float
    host_copy_s: float  # each GPU copying its shard to host memory (an asynchronous save's blocking part)


@dataclass(frozen=True)
class LongRunFacts:
    horizon_s: float
    pools: tuple[PoolFailures, ...]
    restart_s: float
    save_freq: int | None
    async_save: bool
    groups: tuple[CheckpointGroup, ...]  # empty without checkpoints
    test_freq: int | None
    evaluation_s: float
    seed: int

    @property
    def checkpoint_bytes(self) -> float:
        return sum(g.nbytes for g in self.groups)

    @property
    def write_s(self) -> float:
        """Groups write at once, each over its own nodes."""
        return max((g.write_s for g in self.groups), default=0.0)

    @property
    def restore_s(self) -> float:
        return max((g.read_s for g in self.groups), default=0.0)

    def save_s(self, step_s: float) -> float:
        """Seconds training waits for one save: the whole write, or under async_save the copy to host memory plus
        whatever of the background write outlasts the steps until the next save."""
        if self.save_freq is None:
            return 0.0
        if not self.async_save:
            return self.write_s
        copy = max(g.host_copy_s for g in self.groups)
        return copy + max(0.0, self.write_s - self.save_freq * step_s)

    def times(self, step_s: float) -> LongRunTimes:
        if step_s > self.horizon_s:
            raise ScenarioError(Problem(
                f"the horizon ({self.horizon_s:,.0f} s) is shorter than one simulated step ({step_s:,.1f} s)",
                path="run.horizon", valid=f"at least one step, {math.ceil(step_s):,} s or more (e.g. 30d)"))
        return LongRunTimes(self.horizon_s, self.pools, self.restart_s, self.restore_s, self.save_freq,
                            self.save_s(step_s), self.test_freq, self.evaluation_s)

    @classmethod
    def from_bound(cls, bound: Bound) -> LongRunFacts | None:
        scenario = bound.scenario
        if scenario.run.horizon is None:
            return None
        failures = scenario.failures
        assert failures is not None and isinstance(failures.failures_per_gpu_day, dict), \
            "load_scenario resolves every pool's failure rate when run.horizon is set"
        rates = failures.failures_per_gpu_day
        pools = tuple(PoolFailures(pool.name, pool.gpus, rates[pool.name] / SECONDS_PER_DAY)
                      for pool in scenario.cluster.pools)
        checkpoint, evaluation = scenario.checkpoint, scenario.evaluation
        return cls(
            horizon_s=duration_seconds(scenario.run.horizon),
            pools=pools,
            restart_s=failures.restart_s,
            save_freq=checkpoint.save_freq if checkpoint else None,
            async_save=checkpoint.async_save if checkpoint else False,
            groups=checkpoint_groups(bound) if checkpoint else (),
            test_freq=evaluation.test_freq if evaluation else None,
            evaluation_s=evaluation_seconds(bound, evaluation) if evaluation else 0.0,
            seed=scenario.seed,
        )


def checkpoint_groups(bound: Bound) -> tuple[CheckpointGroup, ...]:
    """The actor's checkpoint, and the critic's when the algorithm trains one, by the GPU group that holds them."""
    scenario = bound.scenario
    checkpoint = scenario.checkpoint
    assert checkpoint is not None
    placed = roles(bound)
    trained: list[tuple[str, TrainingLayout]] = [("actor", placed.training)]
    if scenario.algorithm.critic:
        trained.append(("critic", placed.critic or placed.training))
    by_group: dict[str, list[tuple[str, TrainingLayout]]] = {}
    for role, layout in trained:
        by_group.setdefault(placed.group_of(role), []).append((role, layout))
    groups = []
    for members in by_group.values():
        layout = members[0][1]
        hardware = bound.pools[layout.pool]
        nbytes = sum(checkpoint_bytes(bound.model, member) for _, member in members)
        nodes = nodes_of(layout.gpus, hardware.pool.gpus_per_node or 1)
        host_rate = hardware.host_link.bytes_per_s * HOST_LINK_EFFICIENCY
        groups.append(CheckpointGroup(
            roles=tuple(role for role, _ in members), nbytes=nbytes, gpus=layout.gpus, nodes=nodes,
            write_s=storage_seconds(nbytes, nodes, checkpoint.write_gbyte_per_s_per_node * 1e9),
            read_s=storage_seconds(nbytes, nodes, checkpoint.read_gbyte_per_s_per_node * 1e9),
            host_copy_s=nbytes / layout.gpus / host_rate))
    return tuple(groups)


def evaluation_seconds(bound: Bound, evaluation: Evaluation) -> float:
    """One validation pass: the engines generating `prompts × samples_per_prompt` responses of the workload's lengths,
    priced as the estimate prices a step's generation (rlsim.estimate), nothing trained."""
    scenario = bound.scenario
    algorithm = scenario.algorithm.model_copy(update={
        "prompts_per_step": evaluation.prompts, "samples_per_prompt": evaluation.samples_per_prompt,
        "dynamic_sampling": False, "mini_batches": 1})
    # A validation pass generates one batch and waits for it, whatever the training schedule overlaps.
    schedule = scenario.schedule.model_copy(update={"mode": "sync", "streaming": False,
                                                    "partial_rollout": PartialRollout()})
    validation = dataclasses.replace(bound, scenario=scenario.model_copy(update={"algorithm": algorithm,
                                                                                  "schedule": schedule}))
    return estimate_step(validation).stage("gen")
