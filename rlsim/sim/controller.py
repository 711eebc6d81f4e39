"""The machinery every schedule's controller shares: the training stages of a step (log-prob passes, advantages,
updates), publishing a new policy version to the engines, scoring, and the step's record. A schedule
(`rlsim.sim.sync`, `rlsim.sim.off_policy`) decides only when generation runs and which groups a step trains.

Idle time is labelled through recorder contexts: rollout GPUs waiting for their peers (`tail`) or for new weights
(`staleness_block`); training GPUs waiting for samples (`starved`).
"""
from __future__ import annotations

from collections.abc import Generator

import simpy

from rlsim.config.schema import StagePhase
from rlsim.costs.training import TrainingCosts
from rlsim.events import STAGES, StepRecord
from rlsim.pricing.layouts import driver_hand_off
from rlsim.sim.balance import Dispatcher, engines_predict
from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.engines import GenerationEngine
from rlsim.sim.groups import GroupLedger, trained_tokens
from rlsim.sim.reward import Reward
from rlsim.sim.roles import RoleGPUs
from rlsim.sim.rollout import PauseMode
from rlsim.sim.trainer import Trainer

# The role whose GPU group runs each training stage (verl's worker groups: actor, ref, critic).
STAGE_ROLES = {"old_log_prob": "actor", "ref": "reference", "values": "critic", "update_critic": "critic",
               "update_actor": "actor"}
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
        self.roles = RoleGPUs(self.env, sim.recorder, sim.rollout_gpus, (sim.training.first_gpu, sim.training.gpus),
                              sim.prefill_gpus)
        self.groups = GroupLedger(self.env, sim.sampler, Dispatcher(self.schedule, sim.engines, sim.balancer_rng,
                                                                  engines_predict=engines_predict(self.scenario.placement.rollout)),
                                  sim.engines, sim.recorder, self.schedule.group_cap(len(sim.engines)),
                                  self.algorithm.max_response_tokens, self._group_done)
        self.version = 0
        # Fires at each new policy version, and when a dropped group may be replaced: what a producer held back by
        # the staleness bound waits for. Fired whether or not one waits, so every schedule steps the same events.
        self.version_changed = self.env.event()
        self._pause: PauseMode = _WEIGHT_UPDATE_PAUSE[self.schedule.partial_rollout.mode]
        # Engines to stop while training runs; a schedule that trains while generating sets them.
        self._engines_on_training_gpus: list[GenerationEngine] = []
        # The RL driver is one process: it hands one stage's batch to the workers at a time.
        self._driver = simpy.Resource(self.env, capacity=1)
        # Since when GPU groups apart from the actor's have waited for the next batch to train (`starved`).
        self._apart_idle_since = 0.0

    def run(self) -> Generator:
        yield from self._steps(self.sim.bound.run.steps)
        self.groups.drop_leftovers()
        self._label_apart(self._apart_idle_since, self.env.now, "starved", "gen")
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
        self._label_apart(self._apart_idle_since, train_start, "starved", "gen")
        # The forward passes of roles on different GPU groups run at once, or one after another when the driver
        # waits for each call (placement.concurrent_stages); roles on one group take turns.
        forward = [(name, body) for name, body, used in (
            ("old_log_prob", self._old_log_prob(lengths), algo.recompute_old_log_prob),
            ("ref", self._reference_pass(lengths), algo.ref_model),
            ("values", self._forward(sim.critic_trainer, "values", sim.critic, lengths), algo.critic)) if used]
        yield from self._phase("forward", forward, stages, ("old_log_prob", "ref", "values"))
        yield from self._advantages(stages, share=mini_batches / algo.mini_batches)
        updates = [(name, body) for name, body, used in (
            ("update_critic", self._update(sim.critic_trainer, "update_critic", sim.critic, lengths, mini_batches),
             algo.critic),
            ("update_actor", self._update_actor(lengths, mini_batches), True)) if used]
        yield from self._phase("update", updates, stages, ("update_critic", "update_actor"))
        self._apart_idle_since = env.now
        roles.rollout_only_context(train_start, env.now, "staleness_block", "update_actor")
        for engine in shared:
            engine.resume(self.version)  # same weights; a publish that follows pauses them again to load new ones

    def _phase(self, phase: StagePhase, work: list[tuple[str, Generator]],
               stages: dict[str, float], names: tuple[str, ...]) -> Generator:
        """A phase's stages all at once, or (placement.concurrent_stages) one after another, in verl's order."""
        if self.scenario.placement.runs_at_once(phase):
            yield from self._concurrently(work, stages, names)
            return
        for item in work:
            yield from self._concurrently([item], stages, names)

    def _concurrently(self, work: list[tuple[str, Generator]], stages: dict[str, float],
                      names: tuple[str, ...]) -> Generator:
        """Run each (stage, body) on its role's GPU group, holding the group's lock, all at once; add each
        stage's own seconds (from taking the lock to the end) to `stages`. A group idle after its last stage while
        another group works waits at the barrier the next stage needs."""
        env = self.env
        for name in names:
            stages.setdefault(name, 0.0)  # verl's order, whichever stage ends first
        if not work:
            return
        start = env.now
        ends: dict[str, float] = {}
        last: list[str] = []

        def run(stage: str, body: Generator) -> Generator:
            group = self.sim.groups.of(STAGE_ROLES[stage])
            with group.lock.request() as turn:
                yield turn
                began = env.now
                yield from body
                stages[stage] = stages.get(stage, 0.0) + env.now - began
            ends[group.name] = env.now
            last.append(stage)

        yield simpy.AllOf(env, [env.process(run(*item)) for item in work])
        for group in self.sim.groups.training():
            first, count = group.gpus
            self.recorder.context(first, count, ends.get(group.name, start), env.now, "barrier", last[-1])

    def _old_log_prob(self, lengths: list[int]) -> Generator:
        sim = self.sim
        yield from self._forward(sim.trainer, "old_log_prob", sim.actor, lengths)
        if sim.switch is not None:
            # verl's param_offload: the log-prob call puts the weights back on the host; the update loads them.
            yield from self.roles.span_all("offload", sim.switch.call_weights_out_s, "old_log_prob")

    def _reference_pass(self, lengths: list[int]) -> Generator:
        # Only the reference's GPUs copy its weights in (0 s when resident); the engines carry on.
        yield from self.roles.span([self.sim.groups.of("reference").gpus], "reload", self.sim.reference_load_s, "ref")
        yield from self._forward(self.sim.reference_trainer, "ref", self.sim.reference, lengths)

    def _forward(self, trainer: Trainer, stage: str, costs: TrainingCosts | None, lengths: list[int]) -> Generator:
        assert costs is not None
        yield from self._hand_off(stage, len(lengths), STAGE_ROLES[stage])
        yield from trainer.forward_pass(stage, costs, lengths)

    def _update_actor(self, lengths: list[int], mini_batches: int) -> Generator:
        sim = self.sim
        if self.algorithm.recompute_old_log_prob and sim.switch is not None:
            yield from self.roles.span_all("reload", sim.switch.call_weights_in_s, "update_actor")
        yield from self._update(sim.trainer, "update_actor", sim.actor, lengths, mini_batches)

    def _update(self, trainer: Trainer, stage: str, costs: TrainingCosts | None, lengths: list[int],
                mini_batches: int) -> Generator:
        assert costs is not None
        yield from self._hand_off(stage, len(lengths), STAGE_ROLES[stage])
        yield from trainer.update(stage, costs, lengths, mini_batches, self.algorithm.ppo_epochs)

    def _label_apart(self, start: float, end: float, label: str, stage: str) -> None:
        """GPU groups apart from the actor's (a placed critic's or reference's) between training stages."""
        for group in self.sim.groups.apart():
            self.recorder.context(*group.gpus, start, end, label, stage)

    def _hand_off(self, stage: str, sequences: int, role: str = "actor") -> Generator:
        """The driver ships the batch to `role`'s workers for one call of `stage` and takes its results back; it
        serves one call at a time, so the workers also wait for it to finish another role's call."""
        start = self.env.now
        seconds = self.hand_off(stage, sequences)
        if seconds <= 0:
            return
        with self._driver.request() as turn:
            yield turn
            yield self.env.timeout(seconds)
        first, count = self.sim.groups.of(role).gpus
        self.recorder.context(first, count, start, self.env.now, "starved", stage)

    def _advantages(self, stages: dict[str, float], share: float) -> Generator:
        """The driver's Python work between the forward passes and the updates (verl's adv stage, with the step's other
        bookkeeping): `share` of a step's worth when a step trains in several pieces. Every training group waits."""
        seconds = self.driver.trainer_step_overhead_s * share
        start = self.env.now
        yield from self._driver_work("adv", seconds)
        if seconds > 0:
            stages["adv"] = stages.get("adv", 0.0) + seconds
            self._label_apart(start, self.env.now, "starved", "adv")

    def _driver_work(self, stage: str, seconds: float) -> Generator:
        """The driver works for `seconds` on `stage`; the actor's training GPUs wait for it (`starved`)."""
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
        yield simpy.AllOf(env, [engine.pause(self._pause) for engine in sim.rollout_engines])
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
        for engine in sim.rollout_engines:
            engine.resume(self.version)
        return waited

    def _record_step(self, step: int, start: float, groups: list[int], stages: dict[str, float]) -> None:
        for name in STAGES:
            stages.setdefault(name, 0.0)
        samples = self.groups.take_trained(groups)
        cap = self.algorithm.max_response_tokens
        self.recorder.step(StepRecord(step, start, self.env.now, stages, samples=len(samples),
                                      tokens=sum(trained_tokens(r, cap) for r in samples)))
