"""Synchronous on-policy steps: generate a batch, score it, run the log-prob passes and updates, then move the new
weights to the engines, which start the next batch with them.

`SyncController` waits for the whole generation batch (verl); `AprilController` (partial_rollout april) launches
more prompts than it needs, stops at the first `prompts_per_step` complete groups and carries the unfinished ones
into the next step.
"""
from __future__ import annotations

from collections.abc import Generator

import simpy

from rlsim.sim.controller import Controller


class SyncController(Controller):
    def _steps(self, steps: int) -> Generator:
        for step in range(steps):
            yield from self._step(step)

    def _step(self, step: int) -> Generator:
        env, groups = self.env, self.groups
        self.recorder.phase.step = step
        start = env.now
        target = self.algorithm.prompts_per_step
        self._launch(target)
        yield from self._generate(target)
        gen_end = env.now
        self.roles.rollout_context(start, gen_end, "tail", "gen")
        self.roles.training_context(start, gen_end, "starved", "gen")
        trained = self._choose(target)
        stages = {"gen": gen_end - start}
        yield from self._score(trained, stages)
        yield from self._train_on(trained, stages, mini_batches=self.algorithm.mini_batches)
        groups.consume(trained, self.version, step)
        yield from self._publish(stages)  # resumes the engines with the new weights
        self._record_step(step, start, trained, stages)

    def _launch(self, target: int) -> None:
        """Launch the step's groups, less those carried over still generating or complete."""
        groups = self.groups
        launch = self.sampling.launch(self._launch_count(target))
        groups.launch(max(0, launch - groups.generating_count() - groups.complete_count), self.version)

    def _launch_count(self, target: int) -> int:
        return target

    def _generate(self, target: int) -> Generator:
        """The whole generation batch finishes; if dynamic sampling left it short, another batch tops it up."""
        groups = self.groups
        while groups.generating() or groups.complete_count < target:
            if not groups.generating():
                groups.launch(self.sampling.top_up(target - groups.complete_count), self.version)
            yield groups.changed
        yield from groups.settle()

    def _choose(self, target: int) -> list[int]:
        """verl keeps the first train_batch_size kept groups in batch order, whenever they completed."""
        complete = self.groups.take_all_by_id()
        for group in complete[target:]:
            self.groups.drop(group, "batch_full")
        return complete[:target]

    def _group_done(self, group: int) -> None:
        self._group_complete(group)


class AprilController(SyncController):
    def _launch_count(self, target: int) -> int:
        return round(target * self.schedule.partial_rollout.over_provision)

    def _generate(self, target: int) -> Generator:
        groups = self.groups
        while groups.complete_count < target:
            if not groups.generating():
                groups.launch(self.sampling.top_up(target - groups.complete_count), self.version)
            yield groups.changed
            yield from groups.settle()
        # The target is met; stop the stragglers and carry them into the next step.
        yield simpy.AllOf(self.env, [engine.pause("interrupt") for engine in self.sim.rollout_engines])

    def _choose(self, target: int) -> list[int]:
        return self.groups.take(target)  # the first to complete
