"""Boundaries an engine planned ahead and sleeps through, booked once simulated time has passed them."""
from __future__ import annotations

from bisect import bisect_left
from typing import Generic, TypeVar

BoundaryT = TypeVar("BoundaryT")


class PlannedBoundaries(Generic[BoundaryT]):
    """Planned `boundaries` at `times` (in order), of which the first `booked` are booked; the planned work ends at
    `end`. A preemption chain's and a prefill run's (`rlsim.sim.engine.preemption_chain`, `.prefill_run`)."""

    __slots__ = ("boundaries", "times", "booked", "end")

    def __init__(self, boundaries: list[BoundaryT], times: list[float], end: float):
        self.boundaries = boundaries
        self.times = times
        self.booked = 0
        self.end = end

    def due(self, now: float) -> list[BoundaryT]:
        """The boundaries not yet booked that fell strictly before `now` (one at `now` is the step-by-step path's
        next event, which a wake-up or an observer at the same instant precedes), now counted as booked."""
        booked = self.booked
        due = self.booked = bisect_left(self.times, now, booked)  # the times increase
        return self.boundaries[booked:due]
