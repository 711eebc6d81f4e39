"""The machinery every schedule's controller shares: the training stages of a step (log-prob passes, advantages,
updates), publishing a new policy version to the engines, scoring, and the step's record. A schedule
(`rlsim.sim.sync`, `rlsim.sim.off_policy`) decides only when generation runs and which groups a step trains.

Idle time is labelled through recorder contexts: rollout GPUs waiting for their peers (`tail`) or for new weights
(`staleness_block`); training GPUs waiting for samples (`starved`).
"""
from __future__ import annotations

from collections.abc import Generator

import simpy

from rlsim.events import STAGES, StepRecord
from rlsim.pricing.layouts import driver_hand_off
from rlsim.sim.balance import Dispatcher
from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.engines import GenerationEngine
from rlsim.sim.groups import GroupLedger, trained_tokens
from rlsim.sim.reward import Reward
from rlsim.sim.roles import RoleGPUs
from rlsim.sim.rollout import PauseMode

# How the engines stop for a weight update, by schedule.partial_rollout.mode.
_WEIGHT_UPDATE_PAUSE: dict[str, PauseMode] = {"off": "drain", "april": "drain", "interrupt": "interrupt",
                                               "in_flight": "hold"}


class Controller:
    """Runs the scenario's RL steps (`run`); a schedule implements `_steps` and `_group_done`."""

    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling):
        self.sim = sim
        self.env = sim.env
        self.scenario = sim.bound.scenario
        self.algorithm = self.scenario.algorithm
        self.schedule = self.scenario.schedule
        self.recorder = sim.recorder
        self.reward = reward
        self.sampling = sampling
        # The RL driver runs on a training node's host.
        self.driver = sim.bound.framework(self.scenario.placement.training.pool)
        self.hand_off = driver_hand_off(self.driver, self.algorithm)
        self.roles = RoleGPUs(self.env, sim.recorder, sim.rollout_gpus, (sim.training.first_gpu, sim.training.gpus))
        self.groups = GroupLedger(self.env, sim.sampler, Dispatcher(self.schedule, sim.engines, sim.balancer_rng),
                                  sim.engines, sim.recorder, self.schedule.group_cap(len(sim.engines)),
                                  self.algorithm.max_response_tokens, self._group_done)
        self.version = 0
        # Fires at each new policy version, and when a dropped group may be replaced: what a producer held back by
        # the staleness bound waits for. Fired whether or not one waits, so every schedule steps the same events.
        self.version_changed = self.env.event()
        self._pause: PauseMode = _WEIGHT_UPDATE_PAUSE[self.schedule.partial_rollout.mode]
        # Engines to stop while training runs; a schedule that trains while generating sets them.
        self._engines_on_training_gpus: list[GenerationEngine] = []

    def run(self) -> Generator:
        yield from self._steps(self.sim.bound.run.steps)
        self.groups.drop_leftovers()
        self.reward.close(self.env.now)

    def _steps(self, steps: int) -> Generator:
        raise NotImplementedError

    def _group_done(self, group: int) -> None:
        """The group's last sample has finished."""
        raise NotImplementedError

    def _group_complete(self, group: int) -> None:
        """The group is ready to train (scored, off-policy), unless dynamic sampling drops it."""
        if not self.sampling.keeps(self.groups.informative(group)):
            self.groups.drop(group, "dynamic_sampling")
            self._replace_dropped()
        else:
            self.groups.complete(group)
        self.groups.notify()

    def _replace_dropped(self) -> None:
        """A group was dropped after it was launched; a producer may admit another in its place."""
        self._notify_version()

    def _notify_version(self) -> None:
        event, self.version_changed = self.version_changed, self.env.event()
        event.succeed()

    # ------------------------------------------------------------------------------------------- a step's stages

    def _score(self, groups: list[int], stages: dict[str, float]) -> Generator:
        start = self.env.now
        yield from self.reward.score_batch([self.groups.members(g) for g in groups])
        self.roles.all_context(start, self.env.now, "starved", "reward")
        stages["reward"] = self.env.now - start

    def _train_on(self, groups: list[int], stages: dict[str, float], *, mini_batches: int) -> Generator:
        """Log-prob passes and updates over these groups, adding each stage's seconds to `stages`."""
        sim, env, algo, roles = self.sim, self.env, self.algorithm, self.roles
        lengths = self.groups.lengths(groups)
        shared = self._engines_on_training_gpus
        if shared:
            yield simpy.AllOf(env, [engine.pause("interrupt") for engine in shared])
        if sim.switch is not None:
            # The engines go to sleep, freeing their memory: verl's gen timer and NeMo-RL's generation timer end
            # after it. Then the training state comes back.
            yield from roles.span_all("offload", sim.switch.sleep_s, "gen")
            stages["gen"] = stages.get("gen", 0.0) + sim.switch.sleep_s
            yield from roles.span_all("reload", sim.switch.reload_s, "weight_sync")
            stages["weight_sync"] = stages.get("weight_sync", 0.0) + sim.switch.reload_s
        train_start = env.now
        for name, costs, used in (("old_log_prob", sim.actor, algo.recompute_old_log_prob),
                                  ("ref", sim.actor, algo.ref_model), ("values", sim.critic, algo.critic)):
            began = env.now
            if used and name == "ref":
                # Only the training GPUs copy the reference in; the engines carry on.
                yield from roles.span([roles.training], "reload", sim.reference_load_s, name)
            if used:
                yield from self._hand_off(name, len(lengths))
                yield from sim.trainer.forward_pass(name, costs, lengths)
            if used and name == "old_log_prob" and sim.switch is not None:
                # verl's param_offload: the log-prob call puts the weights back on the host; the update loads them.
                yield from roles.span_all("offload", sim.switch.call_weights_out_s, name)
            stages[name] = stages.get(name, 0.0) + env.now - began
        yield from self._advantages(stages, share=mini_batches / algo.mini_batches)
        for name, costs, used in (("update_critic", sim.critic, algo.critic), ("update_actor", sim.actor, True)):
            began = env.now
            if name == "update_actor" and algo.recompute_old_log_prob and sim.switch is not None:
                yield from roles.span_all("reload", sim.switch.call_weights_in_s, name)
            if used:
                yield from self._hand_off(name, len(lengths))
                yield from sim.trainer.update(name, costs, lengths, mini_batches, algo.ppo_epochs)
            stages[name] = stages.get(name, 0.0) + env.now - began
        roles.rollout_only_context(train_start, env.now, "staleness_block", "update_actor")
        for engine in shared:
            engine.resume(self.version)  # same weights; a publish that follows pauses them again to load new ones

    def _hand_off(self, stage: str, sequences: int) -> Generator:
        """The driver ships the batch to the training workers for one call of `stage` and takes its results back."""
        yield from self._driver_work(stage, self.hand_off(stage, sequences))

    def _advantages(self, stages: dict[str, float], share: float) -> Generator:
        """The driver's Python work between the forward passes and the updates (verl's adv stage, with the step's other
        bookkeeping): `share` of a step's worth when a step trains in several pieces."""
        seconds = self.driver.trainer_step_overhead_s * share
        yield from self._driver_work("adv", seconds)
        if seconds > 0:
            stages["adv"] = stages.get("adv", 0.0) + seconds

    def _driver_work(self, stage: str, seconds: float) -> Generator:
        """The driver works for `seconds` on `stage`; the training GPUs wait for it (`starved`)."""
        if seconds <= 0:
            return
        start = self.env.now
        yield self.env.timeout(seconds)
        first, count = self.roles.training
        self.recorder.context(first, count, start, self.env.now, "starved", stage)

    def _publish(self, stages: dict[str, float]) -> Generator:
        """A new policy version: move its weights to the engines."""
        self.version += 1
        self.recorder.phase.version = self.version
        began = self.env.now
        waited = yield from self._update_weights()
        stages["wait"] = stages.get("wait", 0.0) + waited
        stages["weight_sync"] = stages.get("weight_sync", 0.0) + self.env.now - began - waited
        self._notify_version()

    def _update_weights(self) -> Generator:
        """Stop the engines (drain, interrupt or hold in-flight sequences), move the weights, resume. Returns the seconds
        spent waiting for the engines to stop, which verl reports apart from the transfer."""
        sim, env = self.sim, self.env
        began = env.now
        yield simpy.AllOf(env, [engine.pause(self._pause) for engine in sim.engines])
        waited = env.now - began
        self.roles.training_context(began, env.now, "barrier", "weight_sync")
        if sim.switch is not None:
            switch = sim.switch
            # With the weights offloaded per call, the export loads them back first and puts them out again after.
            for label, seconds in (("offload", switch.offload_s), ("reload", switch.call_weights_in_s),
                                   ("reshard", switch.reshard_s), ("offload", switch.call_weights_out_s),
                                   ("reload", switch.wake_s + switch.checkpoint_s)):
                yield from self.roles.span_all(label, seconds, "weight_sync")
        else:
            yield from self.roles.span_all("weight_sync", sim.sync.total_s, "weight_sync")
        for engine in sim.engines:
            engine.resume(self.version)
        return waited

    def _record_step(self, step: int, start: float, groups: list[int], stages: dict[str, float]) -> None:
        for name in STAGES:
            stages.setdefault(name, 0.0)
        samples = self.groups.take_trained(groups)
        cap = self.algorithm.max_response_tokens
        self.recorder.step(StepRecord(step, start, self.env.now, stages, samples=len(samples),
                                      tokens=sum(trained_tokens(r, cap) for r in samples)))
