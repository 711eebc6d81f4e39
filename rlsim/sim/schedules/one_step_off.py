"""one_step_off: generation of batch k + 1 overlaps training on batch k. A producer may start batch b once the policy
has version b − 1 (the staleness bound η = 1, admitting whole batches); weights move at batch boundaries
(rlsim.sim.off_policy)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlsim.config.schedule_kind import ScheduleKind, generation_beside_training
from rlsim.sim.schedules import register_schedule

if TYPE_CHECKING:
    from rlsim.config.schema import Schedule
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward


def one_step_off(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.admission import StalenessAdmission
    from rlsim.sim.off_policy import OffPolicyController, Pacing

    pacing = Pacing.of(sim.bound.scenario)
    per_step = sim.bound.scenario.algorithm.prompts_per_step
    admission = StalenessAdmission(1, pacing.groups_per_version(per_step), batch=per_step)
    return OffPolicyController(sim, reward, sampling, admission, pacing)


def versions_ahead(schedule: Schedule) -> int:
    return 1


# Each batch still generates from one weight update to the next, long tail included (the estimate's default).
register_schedule("one_step_off")(ScheduleKind(
    one_step_off, off_policy=True, staleness=1, takes_max_staleness=False, versions_ahead=versions_ahead,
    steady_step=generation_beside_training))
