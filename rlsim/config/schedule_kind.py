"""What the package asks about a schedule (`schedule.mode`) outside the simulator. A schedule registers one
`ScheduleKind` (rlsim.registry SCHEDULES, one file each in rlsim/sim/schedules/): its controller builder, which only
the simulator calls, and the plain facts that the loader's checks, the default warm-up (rlsim.config.run_length) and
the analytical estimate (rlsim.estimate) read instead of comparing names. So a new schedule states them in its own file,
and nothing outside that file changes.

The facts are read without starting the simulator: a schedule's file imports its controller only when the builder runs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from rlsim import registry

if TYPE_CHECKING:
    from rlsim.config.schema import Schedule

Builder = TypeVar("Builder")


def one_batch_at_a_time(schedule: Schedule) -> float | None:
    """Each batch generates on its own, from one weight update to the next, and pays its own long tail."""
    return None


@dataclass(frozen=True)
class ScheduleKind(Generic[Builder]):
    """A schedule's entry in the registry."""

    controller: Builder  # builds the controller that runs the steps; only the simulator calls it (rlsim.sim.schedules)
    # Generation runs on while the trainer trains, so the step trains groups earlier policy versions generated and
    # every sample is scored as it arrives; not possible on colocated GPUs, which do one at a time. False: each step
    # generates its batch (topped up under dynamic sampling), then scores and trains the groups it keeps.
    off_policy: bool
    # The staleness bound η it runs at: how many policy versions a trained sample may lag behind.
    staleness: float
    # Whether the scenario sets η (schedule.max_staleness, `staleness` when unset); refused where η is fixed.
    takes_max_staleness: bool
    # Policy versions generation may run ahead of training: how many steps the pipeline fills before it is in
    # steady state (rlsim.config.run_length).
    versions_ahead: Callable[[Schedule], int]
    # The estimate's steady-state step from its (gen + reward, training stages, weight_sync) seconds: the step's
    # seconds, and how they combine, in words.
    steady_step: Callable[[float, float, float], tuple[float, str]]
    # For the estimate: how many batches' generation shares one long tail in steady state (None: one at a time).
    batches_in_flight: Callable[[Schedule], float | None] = one_batch_at_a_time


def schedule_kind(mode: str) -> ScheduleKind[Any]:
    """The registered schedule `mode` (loading its home, never the simulator)."""
    kind: ScheduleKind[Any] = registry.SCHEDULES[mode]
    return kind


def modes(**facts: object) -> list[str]:
    """The registered schedules whose facts have these values, by name, e.g. `modes(off_policy=True)`: for messages
    that list the valid ones."""
    return [mode for mode in registry.SCHEDULES.names()
            if all(getattr(schedule_kind(mode), fact) == value for fact, value in facts.items())]


def one_after_another(produce: float, train: float, sync: float) -> tuple[float, str]:
    """A step generates and scores its batch, trains on it, then moves the new weights."""
    return produce + train + sync, "gen + reward + training stages + weight_sync"


def generation_beside_training(produce: float, train: float, sync: float) -> tuple[float, str]:
    """Off-policy, in steady state (after the fill), the next batch generates while this one trains and weights move
    once both are done (engines drain first): the slower side sets the pace. What a batch's generation costs is the
    schedule's `batches_in_flight`: one-step-off generates each batch from one weight update to the next, long tail
    included; async engines never run dry, so a batch costs its throughput."""
    return max(produce, train) + sync, "max(gen + reward, training stages) + weight_sync"
