"""DUET's marker-gated abort as a synchronous controller: each drawn response past the horizon plus the grace window
is cut there and left out of training, unless kept with the keep probability (rlsim.sim.long_tail.early_abort says
why)."""
from __future__ import annotations

from dataclasses import replace

from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.long_tail.early_abort import EARLY_ABORT, EarlyAbort
from rlsim.sim.reward import Reward
from rlsim.sim.sync import SyncController
from rlsim.workload.batches import PromptGroup


class EarlyAbortController(SyncController):
    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling):
        super().__init__(sim, reward, sampling)
        params = self.schedule.long_tail
        assert isinstance(params, EarlyAbort)
        self.params = params
        self.rng = sim.remedy_rng

    def _launch(self, target: int) -> None:
        groups = self.groups
        drawn = groups.sampler.draw(self.sampling.launch(target), self.version)
        plans = [self._aborts(group) for group in drawn]
        groups.send([group for group, _ in plans])
        for group, aborted in plans:
            groups.exclude(group.group, [r for i, r in enumerate(groups.members(group.group)) if aborted[i]],
                           EARLY_ABORT)

    def _aborts(self, group: PromptGroup) -> tuple[PromptGroup, list[bool]]:
        """The group with its marker-less responses cut at the horizon plus the grace window, and which were cut.
        One draw a response, cut or not, so the stream does not depend on the lengths."""
        cut = self.params.cut_tokens
        kept = self.rng.random(len(group.response_tokens)) < self.params.abort_keep_probability
        aborted = [tokens > cut and not keep for tokens, keep in zip(group.response_tokens, kept, strict=True)]
        if not any(aborted):
            return group, aborted
        tokens = tuple(cut if a else t for a, t in zip(aborted, group.response_tokens, strict=True))
        truncated = tuple(a or t for a, t in zip(aborted, group.truncated, strict=True))
        return replace(group, response_tokens=tokens, truncated=truncated), aborted
