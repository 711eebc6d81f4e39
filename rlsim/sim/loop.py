"""The RL loop: the controller that runs a scenario's schedule, with its reward stage and its group filter, chosen
once per run.

sync          generate a batch (all of it, or under APRIL the first `prompts_per_step` complete groups, carrying the
              rest over), score it, train on it, then move the new weights to the engines (`rlsim.sim.sync`).
one_step_off  generation of batch k+1 overlaps training on batch k: a producer may start batch b once the policy has
              version b − 1; weights move at batch boundaries (`rlsim.sim.off_policy`).
async         the producer keeps engines busy within the staleness bound η (`rlsim.sim.admission`); the trainer takes
              complete groups in the order they complete, dropping any too stale to train (`rlsim.sim.off_policy`).
streaming     off-policy training consumes mini-batches as they complete, publishing every k updates (`Pacing`).

Groups come from the workload's sampler, drawn for the policy version that generates them (lengths may drift); a
group of a multi-turn workload is a set of trajectories whose tool calls the engines run. Whether a group is
informative (what dynamic sampling keeps, `rlsim.sim.dynamic_sampling`) is decided when it is drawn. Rewards are
scored by a CPU pool, a reward model's forward pass, or an LLM judge generating a verdict per response on its own
engines (`rlsim.sim.reward`).
"""
from __future__ import annotations

from functools import partial

from rlsim.sim.admission import StalenessAdmission
from rlsim.sim.build import Simulation
from rlsim.sim.controller import Controller
from rlsim.sim.dynamic_sampling import DynamicSampling, KeepAll, Sampling
from rlsim.sim.groups import trained_tokens
from rlsim.sim.off_policy import OffPolicyController, Pacing
from rlsim.sim.reward import JudgeReward, ModelReward, PoolReward, Reward
from rlsim.sim.sync import AprilController, SyncController
from rlsim.workload.filters import expected_kept_fraction
from rlsim.workload.judge import judge_max_verdict
from rlsim.workload.lengths import length_schedule


def controller_for(sim: Simulation) -> Controller:
    scenario = sim.bound.scenario
    schedule, algorithm = scenario.schedule, scenario.algorithm
    reward = reward_for(sim)
    sampling: Sampling = KeepAll()
    if algorithm.dynamic_sampling:
        sampling = DynamicSampling(expected_kept_fraction(scenario.workload, algorithm.samples_per_prompt),
                                   scenario.workload.generation_batch_prompts)
    if schedule.mode == "sync":
        sync = AprilController if schedule.partial_rollout.mode == "april" else SyncController
        return sync(sim, reward, sampling)
    per_step = algorithm.prompts_per_step
    if schedule.streaming:
        pacing = Pacing.streaming(algorithm.mini_batches, schedule.weight_sync.every_updates)
    else:
        pacing = Pacing.whole_batch(algorithm.mini_batches)
    per_version = pacing.groups_per_version(per_step)
    if schedule.mode == "one_step_off":
        admission = StalenessAdmission(1, per_version, batch=per_step)
    else:
        assert schedule.max_staleness is not None
        admission = StalenessAdmission(schedule.max_staleness, per_version)
    return OffPolicyController(sim, reward, sampling, admission, pacing)


def reward_for(sim: Simulation) -> Reward:
    scenario = sim.bound.scenario
    tokens = partial(trained_tokens, max_response_tokens=scenario.algorithm.max_response_tokens)
    if sim.reward is not None:
        return PoolReward(sim.reward)
    if sim.reward_model is not None:
        trainer, costs = sim.reward_model
        return ModelReward(sim.env, trainer, costs, sim.recorder, tokens)
    judge = scenario.workload.reward
    assert judge.kind == "llm_judge"
    return JudgeReward(sim.env, sim.judges, sim.recorder, tokens, judge.instruction_tokens,
                       length_schedule(judge.verdict_tokens).at(0), judge_max_verdict(scenario), sim.reward_rng)
