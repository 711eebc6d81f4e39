"""The schedules (`schedule.mode`), one registered function each: the simulation, its reward stage and its group filter
in, the controller that runs the steps out (rlsim.sim.loop picks one per run). A new schedule is one more function here
or in a module of its own.

This module is where a scenario's loader learns the schedules' names (rlsim.registry), so it imports no simulator at
import time: each builder imports its controller when it runs.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rlsim import registry
from rlsim.registry import Registry

if TYPE_CHECKING:
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.off_policy import Pacing
    from rlsim.sim.reward import Reward

ScheduleBuilder = Callable[["Simulation", "Reward", "Sampling"], "Controller"]
SCHEDULES: Registry[ScheduleBuilder] = registry.SCHEDULES
register_schedule = SCHEDULES.register


@register_schedule("sync")
def sync(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.sync import AprilController, SyncController

    april = sim.bound.scenario.schedule.partial_rollout.mode == "april"
    return (AprilController if april else SyncController)(sim, reward, sampling)


@register_schedule("one_step_off")
def one_step_off(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.admission import StalenessAdmission
    from rlsim.sim.off_policy import OffPolicyController

    pacing = _pacing(sim)
    per_step = sim.bound.scenario.algorithm.prompts_per_step
    admission = StalenessAdmission(1, pacing.groups_per_version(per_step), batch=per_step)
    return OffPolicyController(sim, reward, sampling, admission, pacing)


@register_schedule("async")
def asynchronous(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.admission import StalenessAdmission
    from rlsim.sim.off_policy import OffPolicyController

    pacing = _pacing(sim)
    schedule = sim.bound.scenario.schedule
    assert schedule.max_staleness is not None
    admission = StalenessAdmission(schedule.max_staleness,
                                   pacing.groups_per_version(sim.bound.scenario.algorithm.prompts_per_step))
    return OffPolicyController(sim, reward, sampling, admission, pacing)


def _pacing(sim: Simulation) -> Pacing:
    from rlsim.sim.off_policy import Pacing

    scenario = sim.bound.scenario
    if scenario.schedule.streaming:
        return Pacing.streaming(scenario.algorithm.mini_batches, scenario.schedule.weight_sync.every_updates)
    return Pacing.whole_batch(scenario.algorithm.mini_batches)
