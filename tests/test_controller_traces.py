"""Exact event traces of tiny whole RL steps under each schedule's controller, asserted event by event as SimPy's
own tests do: 2 engines, a trainer, fixed per-stage costs and fixed lengths, so every time is worked out by
hand from the costs below."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import simpy

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.config.workload import RuleReward
from rlsim.sim.build import Simulation, build
from rlsim.sim.groups import TIE_WINDOW_S
from rlsim.sim.loop import controller_for
from rlsim.sim.recorder import Recorder
from rlsim.sim.reward import RewardPool
from rlsim.sim.role_groups import RoleGroups
from rlsim.sim.rollout import RolloutEngine
from tests.interpreted_engine import needs_interpreted_engine
from tests.sim_scenarios import scenario_yaml
from tests.test_sim_rollout import FixedCosts

# The fixed costs. Engines (FixedCosts): 1 s per iteration plus 10 ms per prefill token; a 50-token prompt is
# prefilled in one iteration that also yields the first token, then each decode iteration yields one more.
PROMPT_TOKENS, RESPONSE_TOKENS = 50, 4
REWARD_S = 0.5  # per sample, on 4 CPU workers: a group of 2, or a batch of 4, is scored in 0.5 s
STAGE_S = {"old_log_prob": 1.0, "ref": 1.0, "update_actor": 2.0,  # per pass / per optimizer step
           "values": 1.5, "update_critic": 3.0}  # PPO's critic
ADV_S = 0.25  # the driver's work between the forward passes and the update
WEIGHT_SYNC_S = 0.5


class FixedTrainer:
    """The trainer's interface at fixed seconds per stage, logging each stage as it starts."""

    def __init__(self, env: simpy.Environment, log: list):
        self.env = env
        self.log = log

    def forward_pass(self, stage, costs, lengths, *, label="logprob"):
        self.log.append((stage, self.env.now))
        yield self.env.timeout(STAGE_S[stage])

    def update(self, stage, costs, lengths, mini_batches, epochs):
        for _ in range(mini_batches * epochs):
            self.log.append((stage, self.env.now))
            yield self.env.timeout(STAGE_S[stage])


class TracingRecorder(Recorder):
    """Logs each weight transfer as it starts (once, though it books the rollout and the training GPUs), and each
    step as it ends."""

    def __init__(self, gpus: int, env: simpy.Environment, log: list):
        super().__init__(gpus)
        self.env = env
        self.log = log

    def busy(self, first_gpu, gpu_count, start, end, label, stage, **kwargs):
        if label == "weight_sync" and ("weight_sync", start) not in self.log:
            self.log.append(("weight_sync", start))
        super().busy(first_gpu, gpu_count, start, end, label, stage, **kwargs)

    def step(self, record):
        self.log.append((f"step {record.step} ends", self.env.now))
        super().step(record)


def fixed_run(schedule: str, steps: int, staleness: float | None = None, *,
              critic: str | None = None) -> list[tuple[str, float]]:
    """Two prompts of two samples a step on two 1-GPU engines (round robin, a group's samples spread: each engine
    runs one sample of each group), a trainer on two more GPUs; the trace of `steps` steps, times rounded to 1 ns.
    `critic` makes it PPO, its critic on the actor's GPUs ("shared") or on four GPUs of its own ("apart")."""
    ppo = {"shared": dict(algorithm="ppo"),
           "apart": dict(algorithm="ppo", gpus=8, placement="critic: {gpus: 4}")}.get(critic or "", {})
    text = scenario_yaml(**{**dict(gpus=4), **ppo}, mode="disaggregated", rollout_gpus=2, training_gpus=2, prompts=2,
                         samples=2, steps=steps, schedule=schedule, staleness=staleness,
                         prompt=f"{{kind: fixed, tokens: {PROMPT_TOKENS}}}",
                         response=f"{{kind: fixed, tokens: {RESPONSE_TOKENS}}}", workload="reward: {kind: rule}")
    # The driver's hand-off of the batch is left out (tests/test_driver.py prices it) so the stages keep round times.
    real = build(bind(parse_scenario(
        text + f"framework: {{trainer_step_overhead_s: {ADV_S}, driver_batch_bytes_per_s: null}}\n")))
    env, log = simpy.Environment(), []
    recorder = TracingRecorder(real.recorder.gpus, env, log)

    def probe(event, rollout):
        if event in ("admitted", "finished"):
            log.append((f"{event} s{rollout.seq_id} e{rollout.engine}", env.now))

    engines = [RolloutEngine(env, e, FixedCosts(), 10_000, 8, 1024, e, 1, recorder, lambda r: None, probe=probe)
               for e in range(2)]
    trainer = FixedTrainer(env, log)
    sim: Simulation = dataclasses.replace(
        real, env=env, recorder=recorder, engines=engines, trainer=trainer, reference_trainer=trainer,
        critic_trainer=trainer,
        groups=RoleGroups(env, {"actor": (real.training.first_gpu, real.training.gpus), "critic": (4, 4)},
                          {"actor": "actor", "reference": "actor", "critic": "critic" if critic == "apart" else "actor"}),
        reward=RewardPool(env, RuleReward(kind="rule", cpu_seconds_per_sample=REWARD_S, workers=4),
                          np.random.default_rng(0)),
        reference_load_s=0.0, sync=SimpleNamespace(total_s=WEIGHT_SYNC_S))
    done = env.process(controller_for(sim).run())
    env.run(until=done)
    return times(log)


# The controller lets every completion of an instant arrive before it takes groups: one tie window per decision.
TIE = TIE_WINDOW_S


def times(trace: list[tuple[str, float]]) -> list[tuple[str, float]]:
    return [(name, round(t, 9)) for name, t in trace]


def training(start: float) -> list[tuple[str, float]]:
    """A step's training from `start`: old log-probs (1 s), reference (1 s), the driver's adv work (0.25 s), the
    actor's one optimizer step (2 s), then the weights move (0.5 s) and the step ends."""
    ref = start + 1.0
    update = ref + 1.0 + ADV_S
    sync = update + 2.0
    return [("old_log_prob", start), ("ref", ref), ("update_actor", update), ("weight_sync", sync)]


def admitted(t: float, seqs: range) -> list[tuple[str, float]]:
    """Round robin over the two engines: even sequences on engine 0, then odd ones on engine 1."""
    return ([(f"admitted s{s} e0", t) for s in seqs if s % 2 == 0]
            + [(f"admitted s{s} e1", t) for s in seqs if s % 2 == 1])


def finished(t: float, seqs: range) -> list[tuple[str, float]]:
    return ([(f"finished s{s} e0", t) for s in seqs if s % 2 == 0]
            + [(f"finished s{s} e1", t) for s in seqs if s % 2 == 1])


def generated(prompts_per_engine: int) -> float:
    """Seconds for an engine to generate its samples admitted together: one iteration prefills every prompt
    (1 s + 10 ms per token) and yields each first token, then 3 decode iterations of 1 s yield the rest."""
    return 1.0 + 0.01 * PROMPT_TOKENS * prompts_per_engine + (RESPONSE_TOKENS - 1) * 1.0


@needs_interpreted_engine
def test_a_sync_step_generates_scores_trains_and_syncs_in_turn():
    # Step 0: 2 groups × 2 samples, 2 per engine: done at 2 + 3 = 5 s. The batch's 4 samples are scored at once on
    # 4 workers (0.5 s) once the tie window has passed; training follows; the new weights reach the engines before
    # step 1 launches its groups.
    gen0 = generated(2)
    train0 = gen0 + TIE + REWARD_S
    end0 = train0 + 1.0 + 1.0 + ADV_S + 2.0 + WEIGHT_SYNC_S
    gen1 = end0 + generated(2)
    train1 = gen1 + TIE + REWARD_S
    end1 = train1 + 1.0 + 1.0 + ADV_S + 2.0 + WEIGHT_SYNC_S
    assert fixed_run("sync", 2) == times(
        admitted(0.0, range(4)) + finished(gen0, range(4)) + training(train0) + [("step 0 ends", end0)]
        + admitted(end0, range(4, 8)) + finished(gen1, range(4, 8)) + training(train1) + [("step 1 ends", end1)])


@needs_interpreted_engine
def test_a_critic_on_gpus_of_its_own_runs_its_stages_beside_the_actors():
    # On the actor's GPUs, PPO's stages take turns in verl's order: old log-probs (1 s), reference (1 s), values
    # (1.5 s), adv (0.25 s), the critic's update (3 s), the actor's (2 s). On GPUs of its own, the critic's values pass
    # starts with the old log-probs and its update with the actor's; each phase ends with its slower group.
    start = generated(2) + TIE + REWARD_S

    def trace(forward: list[tuple[str, float]], updates: list[tuple[str, float]], end: float) -> list:
        return times(admitted(0.0, range(4)) + finished(generated(2), range(4)) + forward + updates
                     + [("weight_sync", end), ("step 0 ends", end + WEIGHT_SYNC_S)])

    shared_update = start + 3.5 + ADV_S
    assert fixed_run("sync", 1, critic="shared") == trace(
        [("old_log_prob", start), ("ref", start + 1.0), ("values", start + 2.0)],
        [("update_critic", shared_update), ("update_actor", shared_update + 3.0)], shared_update + 5.0)
    apart_update = start + max(1.0 + 1.0, 1.5) + ADV_S
    assert fixed_run("sync", 1, critic="apart") == trace(
        [("old_log_prob", start), ("values", start), ("ref", start + 1.0)],
        [("update_critic", apart_update), ("update_actor", apart_update)], apart_update + max(3.0, 2.0))


@needs_interpreted_engine
def test_one_step_off_generates_the_next_batch_while_training_on_this_one():
    # Version 0 may generate batches 0 and 1 (⌊(0 + 1 + 1)·2⌋ = 4 groups), admitted as two whole batches at 0: 4
    # samples per engine, prefilled in one iteration of 1 + 2 s, all done at 6 s. Off-policy, each group is scored as
    # it finishes: groups 0 and 1 take the 4 workers until 6.5 s, groups 2 and 3 until 7 s. The trainer takes groups
    # one at a time, each after a tie window: step 0 trains at 6.5 s + 2 windows. Its weight update finds the engines
    # idle; version 1 admits batch 2 (groups 4 and 5) as the step ends.
    gen0 = generated(4)
    train0 = gen0 + REWARD_S + 2 * TIE
    end0 = train0 + 1.0 + 1.0 + ADV_S + 2.0 + WEIGHT_SYNC_S
    # Step 1 trains on groups 2 and 3 (scored at 7 s) at once, while batch 2 generates (2 samples per engine). Its
    # weight update waits for the engines to drain (a weight update under partial_rollout off), then moves the
    # weights: the trainer waits for the tail.
    train1 = end0 + 2 * TIE
    gen1 = end0 + generated(2)
    assert fixed_run("one_step_off", 2) == times(
        admitted(0.0, range(8)) + finished(gen0, range(8)) + training(train0) + [("step 0 ends", end0)]
        + admitted(end0, range(8, 12)) + training(train1)[:3] + finished(gen1, range(8, 12))
        + [("weight_sync", gen1), ("step 1 ends", gen1 + WEIGHT_SYNC_S)])


@needs_interpreted_engine
def test_async_admits_a_fraction_of_a_batch_ahead_and_trains_a_group_one_version_stale():
    # η = 0.5: version 0 admits ⌊(0 + 0.5 + 1)·2⌋ = 3 groups, 3 samples per engine (prefill 1 + 1.5 s), done at
    # 5.5 s. Groups 0 and 1 are scored by 6 s, group 2 by 6.5 s (the workers are busy until 6 s). Step 0 trains on
    # groups 0 and 1 (a tie window each); its weight update lets version 1 admit up to ⌊2.5·2⌋ = 5 groups: 2 more.
    gen0 = generated(3)
    train0 = gen0 + REWARD_S + 2 * TIE
    end0 = train0 + 1.0 + 1.0 + ADV_S + 2.0 + WEIGHT_SYNC_S
    # Step 1 takes group 2 at once (generated by version 0, one version stale: within ⌈0.5⌉ = 1), then waits for
    # group 3, generated from the step's start (2 samples per engine) and scored 0.5 s after.
    gen1 = end0 + generated(2)
    train1 = gen1 + REWARD_S + TIE
    end1 = train1 + 1.0 + 1.0 + ADV_S + 2.0 + WEIGHT_SYNC_S
    assert fixed_run("async", 2, staleness=0.5) == times(
        admitted(0.0, range(6)) + finished(gen0, range(6)) + training(train0) + [("step 0 ends", end0)]
        + admitted(end0, range(6, 10)) + finished(gen1, range(6, 10)) + training(train1) + [("step 1 ends", end1)])
