"""Boundaries an engine planned ahead and sleeps through, booked once simulated time has passed them."""
from __future__ import annotations

from librt.vecs import vec


class PlannedBoundaries:
    """Boundaries planned at `times` (in order), of which the first `booked` are booked; the planned work ends at
    `end`. A preemption chain's and a prefill run's (`rlsim.sim.engine.preemption_chain`, `.prefill_run`), each
    keeping what happens at its boundaries by their index."""

    __slots__ = ("times", "booked", "end")

    def __init__(self, times: vec[float], end: float):
        self.times = times
        self.booked = 0
        self.end = end

    def due(self, now: float) -> int:
        """Count as booked the boundaries that fell strictly before `now` (one at `now` is the step-by-step path's
        next event, which a wake-up or an observer at the same instant precedes); the index past the last of them:
        those from the `booked` before the call up to it are the ones to book now."""
        times, booked = self.times, self.booked
        count = len(times)
        # A forward scan from the last booked: a settle books the few boundaries passed since the one before.
        while booked < count and times[booked] < now:
            booked += 1
        self.booked = booked
        return booked
