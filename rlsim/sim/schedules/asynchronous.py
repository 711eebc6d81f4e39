"""async: a producer keeps the engines generating within the staleness bound η (schedule.max_staleness, rlsim.sim.
admission); the trainer takes complete groups in the order they complete, dropping any too stale to train
(rlsim.sim.off_policy)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlsim.config.run_length import MAX_FILL_STEPS, max_lead
from rlsim.config.schedule_kind import ScheduleKind, generation_beside_training
from rlsim.sim.schedules import register_schedule

if TYPE_CHECKING:
    from rlsim.config.schema import Schedule
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward


def asynchronous(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.admission import StalenessAdmission
    from rlsim.sim.off_policy import OffPolicyController, Pacing

    scenario = sim.bound.scenario
    pacing = Pacing.of(scenario)
    assert scenario.schedule.max_staleness is not None
    admission = StalenessAdmission(scenario.schedule.max_staleness,
                                   pacing.groups_per_version(scenario.algorithm.prompts_per_step),
                                   lead=max_lead(sim.bound.run.steps))
    return OffPolicyController(sim, reward, sampling, admission, pacing)


def versions_ahead(schedule: Schedule) -> int:
    """⌈η⌉, or the cap when no bound is set or the bound is .inf."""
    staleness = schedule.max_staleness
    return MAX_FILL_STEPS if staleness is None or math.isinf(staleness) else math.ceil(staleness)


def batches_in_flight(schedule: Schedule) -> float:
    """The producer admits up to version + η + 1 batches, so at most 1 + η are in flight: an engine's long tail is
    shared by that many batches, not hidden behind an endless queue. At η = 1 each batch still pays most of a tail, at
    large η the engines run at their throughput."""
    assert schedule.max_staleness is not None
    return 1 + schedule.max_staleness  # .inf stays unbounded here; the estimate caps it at the run's steps


register_schedule("async")(ScheduleKind(
    asynchronous, off_policy=True, staleness=1, takes_max_staleness=True, versions_ahead=versions_ahead,
    steady_step=generation_beside_training, batches_in_flight=batches_in_flight))
