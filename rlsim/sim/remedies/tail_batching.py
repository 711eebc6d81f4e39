"""RollPacker's tail batching as a synchronous controller: short rounds over-provision prompts and responses and stop
at the first P0 complete prompts; the prompts they abort wait for a long round of their own (rlsim.sim.long_tail.
tail_batching says why)."""
from __future__ import annotations

from collections import deque
from collections.abc import Generator

import simpy

from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.long_tail.tail_batching import (
    TAIL_BATCHING,
    TailBatching,
    short_round_prompts,
    short_round_samples,
)
from rlsim.sim.reward import Reward
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sync import SyncController
from rlsim.workload.batches import PromptGroup


class TailBatchingController(SyncController):
    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling):
        super().__init__(sim, reward, sampling)
        params = self.schedule.long_tail
        assert isinstance(params, TailBatching)
        self.eta = params.eta
        # Prompts a short round aborted, as drawn, oldest first.
        self.long_prompts: deque[PromptGroup] = deque()
        self._long_round = False
        self.long_rounds: list[int] = []  # the steps that ran a long round

    def _step(self, step: int) -> Generator:
        self._long_round = len(self.long_prompts) >= self.algorithm.prompts_per_step
        if self._long_round:
            self.long_rounds.append(step)
        yield from super()._step(step)

    def _launch(self, target: int) -> None:
        samples = self.algorithm.samples_per_prompt
        if self._long_round:
            # Exactly the deferred prompts, R0 responses each, run to the end.
            self.groups.send([self.groups.sampler.again(self.long_prompts.popleft(), samples) for _ in range(target)])
            return
        self.groups.launch(short_round_prompts(self.eta, target), self.version,
                           samples=short_round_samples(self.eta, samples), quorum=(samples, TAIL_BATCHING))

    def _generate(self, target: int) -> Generator:
        if self._long_round:
            yield from super()._generate(target)
            return
        groups = self.groups
        while groups.complete_count < target:
            yield groups.changed
            yield from groups.settle()
        # P0 prompts have R0 responses each: stop every engine and take back what it still holds.
        yield simpy.AllOf(self.env, [engine.pause("interrupt") for engine in self.sim.engines])
        for engine in self.sim.engines:
            assert isinstance(engine, RolloutEngine), "the loader refuses tail batching on static-batch engines"
            engine.withdraw()

    def _choose(self, target: int) -> list[int]:
        if self._long_round:
            return super()._choose(target)
        groups = self.groups
        kept = groups.take(target)  # the first to complete
        groups.take_all_by_id()  # complete too late: aborted like the unfinished
        for group in groups.open_groups():
            if group not in kept:
                self.long_prompts.append(groups.draft(group))
                groups.drop(group, TAIL_BATCHING)
        return kept
