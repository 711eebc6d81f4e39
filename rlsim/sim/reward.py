"""The reward stage, every kind behind one interface (`Reward`): rule-based checks on a CPU worker pool, sandbox
executions with a latency distribution and a cap on concurrent runs, a reward model's forward pass on its own GPUs, or
an LLM judge generating a verdict per response on its own engines.

A synchronous step scores its batch at once (`score_batch`); off-policy, each group is scored as its last sample
finishes (`score_group`), so the trainer never waits for the reward of samples that finished long ago.
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import simpy

from rlsim import registry
from rlsim.config.workload import RuleReward, SandboxReward
from rlsim.costs.training import TrainingCosts
from rlsim.registry import Registry
from rlsim.sim.recorder import Recorder
from rlsim.sim.role_groups import RoleGroup
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from rlsim.sim.trainer import Trainer
from rlsim.sim.worker_queue import fifo_completions
from rlsim.workload.judge import judge_max_verdict
from rlsim.workload.lengths import LengthDistribution, length_schedule

if TYPE_CHECKING:
    from rlsim.sim.build import Simulation

# A finished rollout's tokens as the reward (and training) reads them.
Tokens = Callable[[Rollout], int]


class Reward(Protocol):
    def score_batch(self, groups: Sequence[Sequence[Rollout]]) -> Generator:
        """Score these groups, all finished now; the process ends when the last score is in."""
        ...

    def score_group(self, members: Sequence[Rollout]) -> Generator:
        """Score one group whose last sample has just finished; the process ends when its last score is in."""
        ...

    def close(self, end: float) -> None:
        """The run ended at `end`: label the reward's own GPUs idle wherever they did not score."""
        ...


class RewardPool:
    """Scores samples; `score(n)` is a process that ends when all n are scored, FIFO on `slots` parallel workers."""

    def __init__(self, env: simpy.Environment, reward: RuleReward | SandboxReward, rng: np.random.Generator):
        self.env = env
        self.reward = reward
        self.rng = rng
        self.slots = reward.workers if reward.kind == "rule" else reward.concurrency
        # When each worker that has served is free again (a heap): scoring is deterministic given the rng, so no SimPy
        # resource is needed. A worker that never served is free from the start, so it needs no entry: the heap grows
        # with the samples scored, not with the pool (10^9 workers would otherwise be a list of 10^9 times).
        self._free_at: list[float] = []

    def service_times(self, n: int) -> np.ndarray:
        if self.reward.kind == "rule":
            return np.full(n, self.reward.cpu_seconds_per_sample)
        return self.reward.median_latency_s * np.exp(self.reward.latency_sigma * self.rng.standard_normal(n))

    def completion_times(self, arrivals: Sequence[float]) -> list[float]:
        """When each sample (arriving at the given times, in order) is scored: the earliest free worker takes it."""
        return fifo_completions(self._free_at, self.slots, list(arrivals),
                                self.service_times(len(arrivals)).tolist())

    def score_batch(self, n: int) -> Generator:
        """Score n samples that are all ready now; the process ends when the last is scored."""
        finish = max(self.completion_times([self.env.now] * n), default=self.env.now)
        yield self.env.timeout(finish - self.env.now)


class PoolReward:
    """Rule or sandbox rewards on CPU workers: no GPUs of their own."""

    def __init__(self, pool: RewardPool):
        self.pool = pool
        self.env = pool.env

    def score_batch(self, groups: Sequence[Sequence[Rollout]]) -> Generator:
        return self.pool.score_batch(sum(len(members) for members in groups))

    def score_group(self, members: Sequence[Rollout]) -> Generator:
        # Booked now, as the last sample finishes, so workers serve groups in the order they finish.
        ready = max(self.pool.completion_times([r.finished for r in sorted(members, key=lambda r: r.finished)]))
        return self._ready_at(ready)

    def _ready_at(self, when: float) -> Generator:
        yield self.env.timeout(max(0.0, when - self.env.now))

    def close(self, end: float) -> None:
        pass


class ModelReward:
    """A reward model's forward pass over the responses on its GPUs (the trainer's machinery, ranks `rm…`): its own,
    or those of a training role it shares, taking turns with that role's stages through the group's lock."""

    def __init__(self, env: simpy.Environment, trainer: Trainer, costs: TrainingCosts, recorder: Recorder,
                 tokens: Tokens, group: RoleGroup, shares_training_gpus: bool):
        self.env = env
        self.trainer = trainer
        self.costs = costs
        self.recorder = recorder
        self.tokens = tokens
        self.group = group  # its GPUs run one pass at a time
        self.shares_training_gpus = shares_training_gpus

    def score_batch(self, groups: Sequence[Sequence[Rollout]]) -> Generator:
        with self.group.lock.request() as turn:
            yield turn
            yield from self.trainer.forward_pass("reward", self.costs,
                                                 [self.tokens(r) for members in groups for r in members],
                                                 label="reward_model")

    def score_group(self, members: Sequence[Rollout]) -> Generator:
        return self.score_batch([members])

    def close(self, end: float) -> None:
        if self.shares_training_gpus:
            return  # the controller labels the GPUs of the training groups
        group = self.trainer.group
        self.recorder.context(group.first_gpu, group.gpus, 0.0, end, "starved", "reward")


class JudgeReward:
    """An LLM judge: its engines read each response with the judge's instruction and write a verdict."""

    def __init__(self, env: simpy.Environment, judges: list[RolloutEngine], recorder: Recorder, tokens: Tokens,
                 instruction_tokens: int, verdicts: LengthDistribution, verdict_cap: int, rng: np.random.Generator):
        self.env = env
        self.judges = judges
        self.recorder = recorder
        self.tokens = tokens
        self.instruction_tokens = instruction_tokens
        self.verdicts = verdicts
        self.verdict_cap = verdict_cap
        self.rng = rng
        self._waiting: dict[Rollout, simpy.Event] = {}  # judge requests in flight -> the event their group waits on
        self._left: dict[simpy.Event, int] = {}  # that event -> verdicts still to come
        self._next_seq = 0
        self._next_judge = 0
        for judge in judges:
            judge.on_finish = self._verdict_done

    def score_batch(self, groups: Sequence[Sequence[Rollout]]) -> Generator:
        yield simpy.AllOf(self.env, [self._ask(members) for members in groups])

    def score_group(self, members: Sequence[Rollout]) -> Generator:
        yield self._ask(members)

    def close(self, end: float) -> None:
        for judge in self.judges:
            judge.close()
            self.recorder.context(judge.first_gpu, judge.gpu_count, 0.0, end, "starved", "reward")

    def _ask(self, members: Sequence[Rollout]) -> simpy.Event:
        """Ask the judge about every response of a group; the event fires when the last verdict is written."""
        verdicts = self.verdicts.sample(self.rng, len(members), self.verdict_cap)
        done = self.env.event()
        self._left[done] = len(members)
        judges = self.judges
        for r, verdict in zip(members, verdicts, strict=True):
            request = Rollout(self._next_seq, self._next_seq, self.tokens(r) + self.instruction_tokens, int(verdict),
                              False, submitted=self.env.now)
            self._next_seq += 1
            self._waiting[request] = done
            # Least outstanding requests, ties to the next in turn: the judges share the work evenly.
            choice = min(range(len(judges)), key=lambda e: (judges[e].outstanding, (e - self._next_judge) % len(judges)))
            self._next_judge = choice + 1
            judges[choice].submit(request)
        return done

    def _verdict_done(self, request: Rollout) -> None:
        done = self._waiting.pop(request)
        self._left[done] -= 1
        if not self._left[done]:
            del self._left[done]
            done.succeed()


# ------------------------------------------------------------------------------------------------ the kinds
# Each `workload.reward.kind` is built by one registered function from the simulation's parts (rlsim.sim.build makes
# the CPU pool, the reward model's trainer or the judge engines the kind needs).

Builder = Callable[["Simulation", Tokens], Reward]
REWARDS: Registry[Builder] = registry.REWARDS
register_reward = REWARDS.register


@register_reward("rule")
@register_reward("sandbox")
def pool_reward(sim: Simulation, tokens: Tokens) -> Reward:
    assert sim.reward is not None
    return PoolReward(sim.reward)


@register_reward("reward_model")
def model_reward(sim: Simulation, tokens: Tokens) -> Reward:
    assert sim.reward_model is not None
    trainer, costs = sim.reward_model
    return ModelReward(sim.env, trainer, costs, sim.recorder, tokens, sim.groups.of("reward_model"),
                       sim.groups.shares_training_group("reward_model"))


@register_reward("llm_judge")
def judge_reward(sim: Simulation, tokens: Tokens) -> Reward:
    scenario = sim.bound.scenario
    judge = scenario.workload.reward
    assert judge.kind == "llm_judge"
    return JudgeReward(sim.env, sim.judges, sim.recorder, tokens, judge.instruction_tokens,
                       length_schedule(judge.verdict_tokens).at(0), judge_max_verdict(scenario), sim.reward_rng)
