"""Off-policy steps (one-step-off and async): a producer keeps the engines generating within the staleness bound
(`rlsim.sim.admission`) while the trainer takes complete groups in the order they complete. Samples are scored as
they arrive, so a group is complete when its last score is in.

Weight updates drain the engines, interrupt in-flight sequences and recompute their KV cache (partial_rollout:
interrupt), or land between two engine iterations with in-flight sequences and their KV cache kept (partial_rollout:
in_flight). Engines on GPUs that also train (hybrid placement) stop while training runs.
"""
from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import simpy

from rlsim.config.schema import Scenario
from rlsim.events import STALENESS_BOUND
from rlsim.sim.admission import StalenessAdmission
from rlsim.sim.build import Simulation
from rlsim.sim.controller import Controller
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.reward import Reward
from rlsim.sim.roles import overlap


@dataclass(frozen=True)
class Pacing:
    """How the trainer consumes a step's batch: in `pieces` equal parts of `updates` optimizer steps each, publishing
    new weights every `publish_every` optimizer steps. A whole batch is one piece and one publish per step;
    streaming trains each fetch of `fetch_mini_batches` mini-batches (verl's require_batches) as soon as its groups
    are in, one update per mini-batch, and publishes every k updates."""

    pieces: int
    updates: int
    publish_every: int

    @classmethod
    def of(cls, scenario: Scenario) -> Pacing:
        """Streaming or whole batches, as the scenario's schedule says."""
        if scenario.schedule.streaming:
            every = scenario.schedule.weight_sync.every_updates
            assert every is not None, "load_scenario resolves it (default: once per RL step)"
            return cls.streaming(scenario.algorithm.mini_batches, every, scenario.schedule.fetch_mini_batches)
        return cls.whole_batch(scenario.algorithm.mini_batches)

    @classmethod
    def whole_batch(cls, mini_batches: int) -> Pacing:
        return cls(1, mini_batches, mini_batches)

    @classmethod
    def streaming(cls, mini_batches: int, every_updates: int, fetch_mini_batches: int = 1) -> Pacing:
        return cls(mini_batches // fetch_mini_batches, fetch_mini_batches, every_updates)

    def groups_per_version(self, per_step: int) -> int:
        """Groups trained by each policy version."""
        return per_step // self.pieces * (self.publish_every // self.updates)


class OffPolicyController(Controller):
    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling,
                 admission: StalenessAdmission, pacing: Pacing):
        super().__init__(sim, reward, sampling)
        self.admission = admission
        self.pacing = pacing
        self._updates = 0  # optimizer steps so far
        self._engines_on_training_gpus = [e for e in sim.engines
                                          if overlap((e.first_gpu, e.gpu_count), self.roles.training)]

    def _steps(self, steps: int) -> Generator:
        producer = self.env.process(self._producer())
        for step in range(steps):
            yield from self._step(step)
        producer.interrupt()

    def _producer(self) -> Generator:
        """Admit groups while the staleness bound allows; rollout GPUs it holds back are `staleness_block`."""
        blocked_from = None
        try:
            while True:
                count = self.admission.admit(self.version)
                if count:
                    self.groups.launch(count, self.version)
                    continue
                blocked_from = self.env.now
                yield self.version_changed
                self.roles.rollout_context(blocked_from, self.env.now, "staleness_block", "gen")
                blocked_from = None
        except simpy.Interrupt:
            if blocked_from is not None:  # the run ended while the bound held the producer back
                self.roles.rollout_context(blocked_from, self.env.now, "staleness_block", "gen")

    def _step(self, step: int) -> Generator:
        """One RL step of the trainer, in the pacing's pieces."""
        self.recorder.phase.step = step
        start = self.env.now
        pacing = self.pacing
        # verl's off-policy "gen" is the trainer's wait for samples; rewards were scored as samples arrived.
        stages = {"gen": 0.0, "reward": 0.0}
        trained: list[int] = []
        for _ in range(pacing.pieces):
            waiting = self.env.now
            groups = yield from self._collect(self.algorithm.prompts_per_step // pacing.pieces)
            self.roles.training_context(waiting, self.env.now, "starved", "gen")
            stages["gen"] += self.env.now - waiting
            yield from self._train_on(groups, stages, mini_batches=pacing.updates)
            self.groups.consume(groups, self.version, step)
            trained += groups
            self._updates += pacing.updates
            if self._updates % pacing.publish_every == 0:
                yield from self._publish(stages)
        self._record_step(step, start, trained, stages)

    def _collect(self, count: int) -> Generator:
        """Wait for `count` complete groups fresh enough to train; staler ones are dropped and replaced."""
        groups = self.groups
        taken: list[int] = []
        while len(taken) < count:
            while not groups.complete_count:
                yield groups.changed
            yield from groups.settle()
            group = groups.take(1)[0]
            if not self.admission.fresh(groups.oldest_version(group), self.version):
                groups.drop(group, STALENESS_BOUND)
                self._replace_dropped()
                continue
            taken.append(group)
        return taken

    def _replace_dropped(self) -> None:
        self.admission.replace()
        super()._replace_dropped()

    def _group_done(self, group: int) -> None:
        self.env.process(self._scored(group, self.reward.score_group(self.groups.members(group))))

    def _scored(self, group: int, scoring: Generator) -> Generator:
        yield from scoring
        self._group_complete(group)
