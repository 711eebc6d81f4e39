"""The RL loop: the controller that runs a scenario's schedule, with its reward stage and its group filter, chosen
once per run. Each schedule is one file in rlsim/sim/schedules/, registered under its `schedule.mode` name with the
builder of its controller.

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

from rlsim.sim.build import Simulation
from rlsim.sim.controller import Controller
from rlsim.sim.dynamic_sampling import DynamicSampling, KeepAll, Sampling
from rlsim.sim.groups import trained_tokens
from rlsim.sim.reward import REWARDS, Reward
from rlsim.sim.schedules import SCHEDULES
from rlsim.workload.filters import drawable_kept_fraction


def controller_for(sim: Simulation) -> Controller:
    scenario = sim.bound.scenario
    algorithm = scenario.algorithm
    reward = reward_for(sim)
    sampling: Sampling = KeepAll()
    if algorithm.dynamic_sampling:
        sampling = DynamicSampling(drawable_kept_fraction(scenario), scenario.workload.generation_batch_prompts)
    return SCHEDULES[scenario.schedule.mode].controller(sim, reward, sampling)


def reward_for(sim: Simulation) -> Reward:
    """The reward stage of `workload.reward.kind` (registered in rlsim.sim.reward)."""
    scenario = sim.bound.scenario
    tokens = partial(trained_tokens, max_response_tokens=scenario.algorithm.max_response_tokens)
    return REWARDS[scenario.workload.reward.kind](sim, tokens)
