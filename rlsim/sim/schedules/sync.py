"""sync: generate a batch, score it, train on it, then move the new weights to the engines, which start the next batch
with them (verl). Under partial_rollout april, the step stops at the first `prompts_per_step` complete groups and
carries the unfinished ones into the next (rlsim.sim.sync); a long-tail remedy (schedule.long_tail) runs its own
controller (rlsim.sim.long_tail)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlsim.config.schedule_kind import ScheduleKind, one_after_another
from rlsim.sim.long_tail import REMEDIES
from rlsim.sim.schedules import register_schedule

if TYPE_CHECKING:
    from rlsim.config.schema import Schedule
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward


def sync(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.sync import AprilController, SyncController

    remedy = sim.bound.scenario.schedule.long_tail
    if remedy is not None:
        return REMEDIES[remedy.kind].controller(sim, reward, sampling)
    april = sim.bound.scenario.schedule.partial_rollout.mode == "april"
    return (AprilController if april else SyncController)(sim, reward, sampling)


def versions_ahead(schedule: Schedule) -> int:
    """None: each step starts from empty engines; one when unfinished responses carry into the next step (partial
    rollouts, or a long-tail remedy that carries them)."""
    carries = schedule.long_tail is not None and REMEDIES[schedule.long_tail.kind].carries_over
    return 1 if schedule.partial_rollout.mode != "off" or carries else 0


register_schedule("sync")(ScheduleKind(sync, off_policy=False, staleness=0, takes_max_staleness=False,
                                       versions_ahead=versions_ahead, steady_step=one_after_another))
