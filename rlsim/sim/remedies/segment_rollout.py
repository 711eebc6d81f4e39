"""UloRL's segment rollout as a synchronous controller: rounds of one segment each, unfinished responses carried
over, a step trained once the pool holds its groups (rlsim.sim.long_tail.segment_rollout says why)."""
from __future__ import annotations

from collections.abc import Generator

from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.long_tail.segment_rollout import SegmentRollout, segment_tokens
from rlsim.sim.reward import Reward
from rlsim.sim.sequence import Rollout, SegmentedRollout
from rlsim.sim.sync import SyncController


class SegmentRolloutController(SyncController):
    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling):
        super().__init__(sim, reward, sampling)
        params = self.schedule.long_tail
        assert isinstance(params, SegmentRollout)
        self.segment_tokens = segment_tokens(params, self.algorithm.max_response_tokens)
        self.groups.segment_tokens = self.segment_tokens
        self.groups.on_rollout_stopped = self._stopped
        self._carried: list[SegmentedRollout] = []  # stopped at a segment's end, to continue next round
        self._round_left = 0  # rollouts of the round under way that have not stopped
        self._round_over = self.env.event()
        self.rounds = 0

    def _launch(self, target: int) -> None:
        """Rounds launch their own groups."""

    def _generate(self, target: int) -> Generator:
        groups = self.groups
        while groups.complete_count < target:
            yield from self._round(target)
            yield from groups.settle()

    def _round(self, target: int) -> Generator:
        """One segment of every response in flight, new prompts topping the groups generating up to `target`."""
        groups = self.groups
        carried, self._carried = self._carried, []
        for rollout in carried:
            rollout.next_segment(self.segment_tokens)
        fresh = groups.launch(target - groups.generating_count(), self.version)
        self._round_left = len(carried) + len(fresh)
        self.rounds += 1
        if not self._round_left:
            return
        groups.dispatcher.dispatch(carried)
        yield self._round_over

    def _stopped(self, rollout: Rollout) -> None:
        assert isinstance(rollout, SegmentedRollout)
        if not rollout.complete:
            self._carried.append(rollout)
        self._round_left -= 1
        if not self._round_left:
            event, self._round_over = self._round_over, self.env.event()
            event.succeed()

    def _choose(self, target: int) -> list[int]:
        return self.groups.take(target)  # the first to complete; the rest of the pool waits for the next step
