"""The RL controller: one RL step after another under the scenario's schedule.

sync          generate a batch (all of it, or under APRIL the first `prompts_per_step` complete groups, carrying the
              rest over), score it, run the log-prob passes and updates, then move the new weights to the engines.
one_step_off  generation of batch k+1 overlaps training on batch k: a producer may start batch b once the policy has
              version b − 1; weights move at batch boundaries (engines drain first).
async         the producer keeps engines busy, admitting a group while fewer than ⌊(version + η + 1)·batch⌋ groups have
              been admitted (AReaL's rule; a fractional η is verl's staleness_threshold); the trainer takes complete
              groups in the order they complete, dropping any that would exceed staleness ⌈η⌉ (policy
              "staleness_bound"). Weight updates drain the engines, interrupt in-flight sequences and recompute
              their KV cache (partial_rollout: interrupt), or land between two engine iterations with in-flight
              sequences and their KV cache kept (partial_rollout: in_flight).

A concurrency cap (`schedule.max_concurrent_groups_per_engine`, verl fully_async's 16 groups per server, or
`schedule.max_concurrent_groups` for the whole rollout, AReaL's max_concurrent_rollouts) holds launched groups back
from the engines until a group in flight has finished its last sample, in any schedule.

Groups come from the workload's sampler, drawn for the policy version that generates them (lengths may drift); a
group of a multi-turn workload is a set of trajectories whose tool calls the engines run. Whether a group is
informative (what dynamic sampling keeps) is decided when it is drawn. Rewards are scored by a CPU pool, a reward
model's forward pass, or an LLM judge generating a verdict per response on its own engines.

Idle time is labelled through recorder contexts: rollout GPUs waiting for their peers (`tail`) or for new weights
(`staleness_block`); training GPUs waiting for samples (`starved`).
"""
from __future__ import annotations

import math
from bisect import insort
from collections import deque
from collections.abc import Generator

import simpy

from rlsim.events import RUN_END, STAGES, SequenceRecord, StepRecord
from rlsim.sim.balance import Dispatcher
from rlsim.sim.build import Simulation, judge_max_verdict
from rlsim.sim.rollout import MultiTurnRollout, PauseMode
from rlsim.sim.sequence import Rollout
from rlsim.workload.batches import PromptGroup
from rlsim.workload.filters import expected_kept_fraction
from rlsim.workload.lengths import length_schedule

# Completions closer together than this count as simultaneous. Fast mode sums iteration times in closed form and exact
# mode one by one, so the same instant can differ by ~1e-15 s between them; decisions must not depend on that.
TIE_WINDOW_S = 1e-9

# How the engines stop for a weight update, by schedule.partial_rollout.mode.
_WEIGHT_UPDATE_PAUSE: dict[str, PauseMode] = {"off": "drain", "april": "drain", "interrupt": "interrupt",
                                               "in_flight": "hold"}


class RLLoop:
    def __init__(self, sim: Simulation):
        self.sim = sim
        self.env = sim.env
        scenario = sim.bound.scenario
        self.scenario = scenario
        # The RL driver runs on a training node's host.
        self.driver = sim.bound.framework(scenario.placement.training.pool)
        self.algorithm = scenario.algorithm
        self.schedule = scenario.schedule
        self.recorder = sim.recorder
        self.version = 0
        self.dispatcher = Dispatcher(scenario.schedule, sim.engines, sim.balancer_rng)
        for engine in sim.engines:
            engine.on_finish = self._on_finish
        self._next_seq = 0
        self._members: dict[int, list[Rollout]] = {}  # group -> its rollouts
        self._left: dict[int, int] = {}  # group -> samples still generating
        self._informative: dict[int, bool] = {}  # group -> whether dynamic sampling keeps it
        # (completion instant in tie windows, group) of groups whose samples all finished (and, off-policy, were
        # scored), kept sorted: taken in that order, so that simultaneous completions never depend on the order SimPy
        # happens to process them in.
        self._complete: list[tuple[int, int]] = []
        self._complete_changed = self.env.event()
        self._version_changed = self.env.event()
        self._group_cap = scenario.schedule.group_cap(len(sim.engines))
        self._held: deque[list[Rollout]] = deque()  # launched groups the concurrency cap keeps from the engines
        self._generating = 0  # groups sent to the engines whose last sample has not finished
        self._dropped_groups = 0  # groups dropped by the staleness bound or dynamic sampling; the producer replaces them
        self._trained: dict[int, list[Rollout]] = {}  # group -> its rollouts, once trained
        self._updates = 0  # optimizer steps so far
        self._reward_model_lock = simpy.Resource(self.env, capacity=1)  # the reward model's GPUs run one pass at a time
        workload = scenario.workload
        self._kept = expected_kept_fraction(workload, self.algorithm.samples_per_prompt)
        self._judging: dict[Rollout, simpy.Event] = {}  # judge requests in flight -> the event their group waits on
        self._judging_left: dict[simpy.Event, int] = {}  # that event -> verdicts still to come
        self._judge_seq = 0
        self._judge_dispatch = 0
        if sim.judges:
            self._verdicts = length_schedule(workload.reward.verdict_tokens).at(0)
            self._verdict_cap = judge_max_verdict(scenario)
            for judge in sim.judges:
                judge.on_finish = self._verdict_done

    # ------------------------------------------------------------------------------------------- entry point

    def run(self) -> Generator:
        steps = self.scenario.run.steps
        if self.schedule.mode == "sync":
            for step in range(steps):
                yield from self._sync_step(step)
        else:
            eta = 1 if self.schedule.mode == "one_step_off" else self.schedule.max_staleness
            assert eta is not None
            producer = self.env.process(self._producer(eta))
            for step in range(steps):
                yield from self._off_policy_step(step, eta)
            producer.interrupt()
        self._drop_leftovers()
        if self.sim.reward_model is not None:
            # The reward model's GPUs wait for samples whenever they are not scoring.
            group = self.sim.reward_model[0].group
            self.recorder.context(group.first_gpu, group.gpus, 0.0, self.env.now, "starved", "reward")
        for judge in self.sim.judges:
            judge.close()
            self.recorder.context(judge.first_gpu, judge.gpu_count, 0.0, self.env.now, "starved", "reward")

    # ------------------------------------------------------------------------------------------- sync

    def _sync_step(self, step: int) -> Generator:
        sim, env = self.sim, self.env
        self.recorder.phase.step = step
        start = env.now
        target = self.algorithm.prompts_per_step
        partial = self.schedule.partial_rollout
        launch = round(target * partial.over_provision) if partial.mode == "april" else target
        batch = self.scenario.workload.generation_batch_prompts
        if self.algorithm.dynamic_sampling and batch is not None:
            launch = max(launch, batch)  # verl's gen_batch_size: whole generation batches
        in_flight = sum(1 for left in self._left.values() if left > 0)
        self._launch(max(0, launch - in_flight - len(self._complete)))
        if partial.mode == "april":
            while len(self._complete) < target:
                if not self._in_flight():
                    self._launch(self._top_up(target))
                yield self._complete_changed
                yield from self._settle()
            # APRIL: the target is met; stop the stragglers and carry them into the next step.
            yield simpy.AllOf(env, [engine.pause("interrupt") for engine in sim.engines])
        else:
            # The whole generation batch finishes; if dynamic sampling left it short, another batch tops it up.
            while self._in_flight() or len(self._complete) < target:
                if not self._in_flight():
                    self._launch(self._top_up(target))
                yield self._complete_changed
            yield from self._settle()
        gen_end = env.now
        first, count = sim.rollout_gpus
        self.recorder.context(first, count, start, gen_end, "tail", "gen")
        self._training_context(start, gen_end, "starved", "gen")
        if partial.mode == "april":
            groups = self._take(target)  # the first to complete
        else:
            # verl keeps the first train_batch_size kept groups in batch order, whenever they completed.
            self._complete.sort(key=lambda item: item[1])
            groups = [group for _, group in self._complete[:target]]
            for _, group in self._complete[target:]:
                self._drop(group, "batch_full")
            self._complete = []
        stages = {"gen": gen_end - start}
        yield from self._reward(groups, stages)
        yield from self._train_on(groups, stages, mini_batches=self.algorithm.mini_batches)
        self._consume(step, groups)
        yield from self._publish(stages)  # resumes the engines with the new weights
        self._record_step(step, start, groups, stages)

    # ------------------------------------------------------------------------------------------- off-policy

    def _producer(self, eta: float) -> Generator:
        """Admit groups while the staleness bound allows; rollout GPUs it holds back are `staleness_block`."""
        per_step = self.algorithm.prompts_per_step
        per_version = per_step
        if self.schedule.streaming:
            # Streaming publishes weights every `every_updates` mini-batches: that many groups per policy version.
            per_version = per_step // self.algorithm.mini_batches * self.schedule.weight_sync.every_updates
        admitted = 0
        blocked_from = None
        try:
            while True:
                # A fractional bound (verl's staleness_threshold) admits that fraction of a batch ahead.
                allowed = math.floor((self.version + eta + 1) * per_version) + self._dropped_groups
                if admitted < allowed:
                    batch = per_step if self.schedule.mode == "one_step_off" else allowed - admitted
                    self._launch(batch)
                    admitted += batch
                    continue
                blocked_from = self.env.now
                yield self._version_changed
                self._rollout_context(blocked_from, "staleness_block")
                blocked_from = None
        except simpy.Interrupt:
            if blocked_from is not None:  # the run ended while the bound held the producer back
                self._rollout_context(blocked_from, "staleness_block")

    def _rollout_context(self, since: float, label: str) -> None:
        first, count = self.sim.rollout_gpus
        self.recorder.context(first, count, since, self.env.now, label, "gen")

    def _off_policy_step(self, step: int, eta: float) -> Generator:
        """One RL step of the trainer; with streaming, one optimizer step per mini-batch as soon as its groups are in."""
        self.recorder.phase.step = step
        start = self.env.now
        algo = self.algorithm
        # verl's off-policy "gen" is the trainer's wait for samples; rewards were scored as samples arrived.
        stages = {"gen": 0.0, "reward": 0.0}
        trained: list[int] = []
        pieces = algo.mini_batches if self.schedule.streaming else 1
        for _ in range(pieces):
            waiting = self.env.now
            groups = yield from self._collect(algo.prompts_per_step // pieces, eta)
            self._training_context(waiting, self.env.now, "starved", "gen")
            stages["gen"] += self.env.now - waiting
            yield from self._train_on(groups, stages, mini_batches=algo.mini_batches // pieces)
            self._consume(step, groups)
            trained += groups
            self._updates += algo.mini_batches // pieces
            if not self.schedule.streaming or self._updates % self.schedule.weight_sync.every_updates == 0:
                yield from self._publish(stages)
        self._record_step(step, start, trained, stages)

    def _collect(self, count: int, eta: float) -> Generator:
        """Wait for `count` complete groups fresh enough to train: more than ⌈η⌉ versions old are dropped."""
        groups: list[int] = []
        while len(groups) < count:
            while not self._complete:
                yield self._complete_changed
            yield from self._settle()
            group = self._take(1)[0]
            oldest = min(r.version_started for r in self._members[group])
            if self.version - oldest > math.ceil(eta):
                self._drop(group, "staleness_bound")
                self._dropped_groups += 1
                self._notify_version()  # the producer may admit a replacement
                continue
            groups.append(group)
        return groups

    # ------------------------------------------------------------------------------------------- shared stages

    def _reward(self, groups: list[int], stages: dict[str, float]) -> Generator:
        start = self.env.now
        samples = sum(len(self._members[g]) for g in groups)
        if self.sim.reward is not None:
            yield from self.sim.reward.score_batch(samples)
        elif self.sim.judges:
            yield simpy.AllOf(self.env, [self._judge(g) for g in groups])
        else:
            trainer, costs = self.sim.reward_model
            yield from trainer.forward_pass("reward", costs, self._lengths(groups), label="reward_model")
        self._all_roles_context(start, self.env.now, "starved", "reward")
        stages["reward"] = self.env.now - start

    def _train_on(self, groups: list[int], stages: dict[str, float], *, mini_batches: int) -> Generator:
        """Log-prob passes and updates over these groups, adding each stage's seconds to `stages`."""
        sim, env, algo = self.sim, self.env, self.algorithm
        lengths = self._lengths(groups)
        shared = []
        if self.schedule.mode != "sync":
            # Hybrid: engines on GPUs that also train stop while training runs (their sequences are recomputed later).
            shared = [e for e in sim.engines if _overlap((e.first_gpu, e.gpu_count), self._training_range())]
            if shared:
                yield simpy.AllOf(env, [engine.pause("interrupt") for engine in shared])
        if sim.switch is not None:
            yield from self._span_all("reload", sim.switch.reload_s, "weight_sync")
        train_start = env.now
        for name, costs, used in (("old_log_prob", sim.actor, algo.recompute_old_log_prob),
                                  ("ref", sim.actor, algo.ref_model), ("values", sim.critic, algo.critic)):
            began = env.now
            if used and name == "ref":
                # Only the training GPUs copy the reference in; the engines carry on.
                yield from self._span([self._training_range()], "reload", sim.reference_load_s, name)
            if used:
                yield from sim.trainer.forward_pass(name, costs, lengths)
            if used and name == "old_log_prob" and sim.switch is not None:
                # verl's param_offload: the log-prob call puts the weights back on the host; the update loads them.
                yield from self._span_all("offload", sim.switch.call_weights_out_s, name)
            stages[name] = stages.get(name, 0.0) + env.now - began
        yield from self._advantages(stages, share=mini_batches / algo.mini_batches)
        for name, costs, used in (("update_critic", sim.critic, algo.critic), ("update_actor", sim.actor, True)):
            began = env.now
            if name == "update_actor" and algo.recompute_old_log_prob and sim.switch is not None:
                yield from self._span_all("reload", sim.switch.call_weights_in_s, name)
            if used:
                yield from sim.trainer.update(name, costs, lengths, mini_batches, algo.ppo_epochs)
            stages[name] = stages.get(name, 0.0) + env.now - began
        self._rollout_only_context(train_start, env.now, "staleness_block")
        for engine in shared:
            engine.resume(self.version)  # same weights; a publish that follows pauses them again to load new ones

    def _advantages(self, stages: dict[str, float], share: float) -> Generator:
        """The driver's Python work between the forward passes and the updates (verl's adv stage, with the step's other
        bookkeeping): `share` of a step's worth when a step trains in several pieces. The training GPUs wait."""
        seconds = self.driver.trainer_step_overhead_s * share
        if seconds <= 0:
            return
        start = self.env.now
        yield self.env.timeout(seconds)
        first, count = self._training_range()
        self.recorder.context(first, count, start, self.env.now, "starved", "adv")
        stages["adv"] = stages.get("adv", 0.0) + seconds

    def _publish(self, stages: dict[str, float]) -> Generator:
        """A new policy version: move its weights to the engines."""
        self.version += 1
        self.recorder.phase.version = self.version
        began = self.env.now
        waited = yield from self._update_weights()
        stages["wait"] = stages.get("wait", 0.0) + waited
        stages["weight_sync"] = stages.get("weight_sync", 0.0) + self.env.now - began - waited
        self._notify_version()

    def _record_step(self, step: int, start: float, groups: list[int], stages: dict[str, float]) -> None:
        for name in STAGES:
            stages.setdefault(name, 0.0)
        samples = [r for g in groups for r in self._trained[g]]
        self.recorder.step(StepRecord(step, start, self.env.now, stages, samples=len(samples),
                                      tokens=sum(self._trained_tokens(r) for r in samples)))

    def _update_weights(self) -> Generator:
        """Stop the engines (drain, interrupt or hold in-flight sequences), move the weights, resume. Returns the seconds
        spent waiting for the engines to stop, which verl reports apart from the transfer."""
        sim, env = self.sim, self.env
        how = _WEIGHT_UPDATE_PAUSE[self.schedule.partial_rollout.mode]
        began = env.now
        yield simpy.AllOf(env, [engine.pause(how) for engine in sim.engines])
        waited = env.now - began
        self._training_context(began, env.now, "barrier", "weight_sync")
        if sim.switch is not None:
            switch = sim.switch
            # With the weights offloaded per call, the export loads them back first and puts them out again after.
            for label, seconds in (("offload", switch.offload_s), ("reload", switch.call_weights_in_s),
                                   ("reshard", switch.reshard_s), ("offload", switch.call_weights_out_s),
                                   ("reload", switch.wake_s + switch.checkpoint_s)):
                yield from self._span_all(label, seconds, "weight_sync")
        else:
            yield from self._span_all("weight_sync", sim.sync.total_s, "weight_sync")
        for engine in sim.engines:
            engine.resume(self.version)
        return waited

    # ------------------------------------------------------------------------------------------- rollouts

    def _launch(self, count: int) -> None:
        if count <= 0:
            return
        launched = []
        for group in self.sim.sampler.draw(count, self.version):
            members = [self._rollout(group, i) for i in range(len(group.response_tokens))]
            self._members[group.group] = members
            self._left[group.group] = len(members)
            self._informative[group.group] = group.informative
            launched.append(members)
        if self._group_cap is None:
            self.dispatcher.dispatch(r for members in launched for r in members)
            return
        self._held.extend(launched)
        self._send_held()

    def _send_held(self) -> None:
        """Send held groups to the engines while the concurrency cap has room, in launch order; a group waits in the
        framework's queue, not the engine's, so its samples count as submitted when sent."""
        assert self._group_cap is not None
        while self._held and self._generating < self._group_cap:
            members = self._held.popleft()
            for rollout in members:
                rollout.submitted = self.env.now
            self._generating += 1
            self.dispatcher.dispatch(members)

    def _rollout(self, group: PromptGroup, i: int) -> Rollout:
        if group.turns is not None:
            rollout: Rollout = MultiTurnRollout(self._next_seq, group.group, group.prompt_tokens,
                                                group.response_tokens[i], group.truncated[i], submitted=self.env.now,
                                                turns=group.turns[i])
        else:
            rollout = Rollout(self._next_seq, group.group, group.prompt_tokens, group.response_tokens[i],
                              group.truncated[i], submitted=self.env.now)
        self._next_seq += 1
        return rollout

    def _on_finish(self, rollout: Rollout) -> None:
        group = rollout.group
        self._left[group] -= 1
        if self._left[group]:
            return
        if self._group_cap is not None:
            # The group's place frees now; a held group goes out once the engine's callback has returned (a launch
            # sends its own groups, so nothing need be scheduled while none is held).
            self._generating -= 1
            if self._held:
                self.env.timeout(0).callbacks.append(lambda _: self._send_held())
        if self.schedule.mode == "sync":
            self._group_complete(group)
            return
        if self.sim.judges:
            self.env.process(self._judged(group))
            return
        if self.sim.reward is None:
            self.env.process(self._score_on_reward_model(group))
            return
        # Off-policy: samples are scored as they arrive; the group is ready when its last score is in.
        members = self._members[group]
        ready = max(self.sim.reward.completion_times([r.finished for r in sorted(members, key=lambda r: r.finished)]))
        self.env.process(self._ready_at(group, ready))

    def _score_on_reward_model(self, group: int) -> Generator:
        """Off-policy with a reward model: each finished group is scored by a forward pass, one pass at a time."""
        trainer, costs = self.sim.reward_model
        with self._reward_model_lock.request() as turn:
            yield turn
            yield from trainer.forward_pass("reward", costs, self._lengths([group]), label="reward_model")
        self._group_complete(group)

    def _judged(self, group: int) -> Generator:
        yield self._judge(group)
        self._group_complete(group)

    def _judge(self, group: int) -> simpy.Event:
        """Ask the judge about every response of the group; the event fires when the last verdict is written."""
        members = self._members[group]
        instruction = self.scenario.workload.reward.instruction_tokens
        verdicts = self._verdicts.sample(self.sim.reward_rng, len(members), self._verdict_cap)
        done = self.env.event()
        self._judging_left[done] = len(members)
        for r, verdict in zip(members, verdicts, strict=True):
            request = Rollout(self._judge_seq, self._judge_seq, self._trained_tokens(r) + instruction, int(verdict),
                              False, submitted=self.env.now)
            self._judge_seq += 1
            self._judging[request] = done
            judges = self.sim.judges
            # Least outstanding requests, ties to the next in turn: the judges share the work evenly.
            choice = min(range(len(judges)), key=lambda e: (judges[e].outstanding, (e - self._judge_dispatch)
                                                               % len(judges)))
            self._judge_dispatch = choice + 1
            judges[choice].submit(request)
        return done

    def _verdict_done(self, request: Rollout) -> None:
        done = self._judging.pop(request)
        self._judging_left[done] -= 1
        if not self._judging_left[done]:
            del self._judging_left[done]
            done.succeed()

    def _ready_at(self, group: int, when: float) -> Generator:
        yield self.env.timeout(max(0.0, when - self.env.now))
        self._group_complete(group)

    def _group_complete(self, group: int) -> None:
        if self.algorithm.dynamic_sampling and not self._informative[group]:
            self._drop(group, "dynamic_sampling")
            self._dropped_groups += 1  # off-policy: the producer admits a replacement
            self._notify_version()
        else:
            # Kept in the order `_take` serves: completion instant (to the tie window), then group id.
            insort(self._complete, (round(self.env.now / TIE_WINDOW_S), group))
        event, self._complete_changed = self._complete_changed, self.env.event()
        event.succeed()

    def _take(self, count: int) -> list[int]:
        """The `count` earliest-completed groups (simultaneous ones by group id), removed from the complete set."""
        taken = [group for _, group in self._complete[:count]]
        del self._complete[:count]
        return taken

    def _settle(self) -> Generator:
        """Let every completion of this instant arrive before deciding which groups to take."""
        yield self.env.timeout(TIE_WINDOW_S)
        while True:
            seen = len(self._complete)
            yield self.env.timeout(0)  # queues behind every event already due now
            if len(self._complete) == seen:
                return

    def _in_flight(self) -> bool:
        return any(left > 0 for left in self._left.values())

    def _top_up(self, target: int) -> int:
        """Groups to launch so that, at the rate dynamic sampling keeps them, the batch is expected to fill; a whole
        generation batch when the workload sets one (verl's gen_batch_size)."""
        if self.algorithm.dynamic_sampling and self.scenario.workload.generation_batch_prompts is not None:
            return self.scenario.workload.generation_batch_prompts
        kept = self._kept if self.algorithm.dynamic_sampling else 1.0
        return math.ceil((target - len(self._complete)) / kept)

    def _notify_version(self) -> None:
        event, self._version_changed = self._version_changed, self.env.event()
        event.succeed()

    def _lengths(self, groups: list[int]) -> list[int]:
        return [self._trained_tokens(r) for g in groups for r in self._members[g]]

    def _trained_tokens(self, r: Rollout) -> int:
        """A finished rollout's tokens in training: its context, the response part (generated and tool tokens)
        cut at max_response_tokens as verl cuts multi-turn responses."""
        return r.prompt_tokens + min(r.context_tokens - r.prompt_tokens, self.algorithm.max_response_tokens)

    def _consume(self, step: int, groups: list[int]) -> None:
        for group in groups:
            members = self._members.pop(group)
            for r in members:
                self.recorder.sequence(self._record(r, self.version, step))
            self._trained[group] = members
            del self._left[group]
            del self._informative[group]

    def _drop(self, group: int, policy: str) -> None:
        for r in self._members.pop(group):
            self.recorder.sequence(self._record(r, -1, -1, dropped_by=policy))
        del self._left[group]
        del self._informative[group]

    def _drop_leftovers(self) -> None:
        """Rollouts still generating or waiting when the last step ends are dropped by the run's end, and named so."""
        for group in list(self._members):
            self._drop(group, RUN_END)

    def _record(self, r: Rollout, version: int, step: int, dropped_by: str = "") -> SequenceRecord:
        # A trajectory's prompt tokens are all it did not generate: its prompt and every tool response appended.
        return SequenceRecord(r.seq_id, r.group, r.engine, r.context_tokens - r.generated, r.generated, r.truncated,
                              r.submitted, r.finished, r.version_started, version, step, r.preemptions, dropped_by,
                              r.admitted, max(0, r.admissions - 1))

    # ------------------------------------------------------------------------------------------- spans

    def _span(self, blocks: list[tuple[int, int]], label: str, seconds: float, stage: str) -> Generator:
        """The GPU ranges `blocks` busy with `label` for `seconds`, then on."""
        if seconds <= 0:
            return
        start = self.env.now
        for first, count in blocks:
            self.recorder.busy(first, count, start, start + seconds, label, stage)
        yield self.env.timeout(seconds)

    def _span_all(self, label: str, seconds: float, stage: str) -> Generator:
        yield from self._span(self._role_blocks(), label, seconds, stage)

    def _training_range(self) -> tuple[int, int]:
        return self.sim.training.first_gpu, self.sim.training.gpus

    def _role_blocks(self) -> list[tuple[int, int]]:
        """GPU ranges of rollout and training, without counting shared GPUs twice."""
        first, count = self.sim.rollout_gpus
        training = self.sim.training
        t_first, t_count = training.first_gpu, training.gpus
        if t_first >= first + count or t_first + t_count <= first:
            return [(first, count), (t_first, t_count)]
        lo, hi = min(first, t_first), max(first + count, t_first + t_count)
        return [(lo, hi - lo)]

    def _all_roles_context(self, start: float, end: float, label: str, stage: str) -> None:
        for first, count in self._role_blocks():
            self.recorder.context(first, count, start, end, label, stage)

    def _training_context(self, start: float, end: float, label: str, stage: str) -> None:
        """Training GPUs that do not also generate (colocated GPUs keep the rollout's context)."""
        training = self.sim.training
        for first, count in _minus_range((training.first_gpu, training.gpus), self.sim.rollout_gpus):
            self.recorder.context(first, count, start, end, label, stage)

    def _rollout_only_context(self, start: float, end: float, label: str) -> None:
        """Rollout GPUs that do not train wait for new weights while training runs."""
        first, count = self.sim.rollout_gpus
        training = self.sim.training
        for gpu_first, gpu_count in _minus_range((first, count), (training.first_gpu, training.gpus)):
            self.recorder.context(gpu_first, gpu_count, start, end, label, "update_actor")


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _minus_range(a: tuple[int, int], b: tuple[int, int]) -> list[tuple[int, int]]:
    a0, a1 = a[0], a[0] + a[1]
    b0, b1 = b[0], b[0] + b[1]
    pieces = [(a0, min(a1, b0)), (max(a0, b1), a1)]
    return [(lo, hi - lo) for lo, hi in pieces if hi > lo]
