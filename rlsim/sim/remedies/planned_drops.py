"""A synchronous controller for remedies that decide at launch which responses will not train: each drawn group is
planned once (its responses' lengths changed where they stop early, and which of them are left out), sent to the
engines, and the left-out responses excluded from training under the remedy's name (DUET's aborts, ARRoL's pruning)."""
from __future__ import annotations

from typing import Generic, TypeVar

from rlsim.config.long_tail import LongTailParams
from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.reward import Reward
from rlsim.sim.sync import SyncController
from rlsim.workload.batches import PromptGroup

P = TypeVar("P", bound=LongTailParams)


class PlannedDropsController(SyncController, Generic[P]):
    """`policy`: the name the dropped responses' records carry; `kind`: the remedy's parameter class, whose values
    are `params`; `samples`: responses drawn per prompt (None: the budget's). A subclass plans each group in
    `_plan`."""

    policy = ""
    kind: type[P]
    samples: int | None = None

    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling):
        super().__init__(sim, reward, sampling)
        params = self.schedule.long_tail
        assert isinstance(params, self.kind)
        self.params: P = params
        self.rng = sim.remedy_rng

    def _launch(self, target: int) -> None:
        groups = self.groups
        drawn = groups.sampler.draw(self.sampling.launch(target), self.version, self.samples)
        plans = [self._plan(group) for group in drawn]
        groups.send([group for group, _ in plans])
        for group, dropped in plans:
            groups.exclude(group.group, [r for i, r in enumerate(groups.members(group.group)) if i in dropped],
                           self.policy)

    def _plan(self, group: PromptGroup) -> tuple[PromptGroup, set[int]]:
        """The group as the engines generate it, and the indices of its responses that will not train."""
        raise NotImplementedError
