"""Boundaries an engine planned ahead and sleeps through, booked once simulated time has passed them."""
from __future__ import annotations

from bisect import bisect_left


class PlannedBoundaries:
    """Boundaries planned at `times` (in order), of which the first `booked` are booked; the planned work ends at
    `end`. A preemption chain's and a prefill run's (`rlsim.sim.engine.preemption_chain`, `.prefill_run`), each
    keeping what happens at its boundaries by their index."""

    __slots__ = ("times", "booked", "end")

    def __init__(self, times: list[float], end: float):
        self.times = times
        self.booked = 0
        self.end = end

    def due(self, now: float) -> int:
        """Count as booked the boundaries that fell strictly before `now` (one at `now` is the step-by-step path's
        next event, which a wake-up or an observer at the same instant precedes); the index past the last of them:
        those from the `booked` before the call up to it are the ones to book now."""
        self.booked = bisect_left(self.times, now, self.booked)  # the times increase
        return self.booked
