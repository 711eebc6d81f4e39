"""DUET's marker-gated abort as a synchronous controller: each drawn response past the horizon plus the grace window
is cut there and left out of training, unless kept with the keep probability (rlsim.sim.long_tail.early_abort says
why)."""
from __future__ import annotations

from dataclasses import replace

from rlsim.sim.long_tail.early_abort import EARLY_ABORT, EarlyAbort
from rlsim.sim.remedies.planned_drops import PlannedDropsController
from rlsim.workload.batches import PromptGroup


class EarlyAbortController(PlannedDropsController[EarlyAbort]):
    policy = EARLY_ABORT
    kind = EarlyAbort

    def _plan(self, group: PromptGroup) -> tuple[PromptGroup, set[int]]:
        """The group with its marker-less responses cut at the horizon plus the grace window, and which were cut.
        One draw a response, cut or not, so the stream does not depend on the lengths."""
        cut = self.params.cut_tokens
        kept = self.rng.random(len(group.response_tokens)) < self.params.abort_keep_probability
        aborted = {i for i, (tokens, keep) in enumerate(zip(group.response_tokens, kept, strict=True))
                   if tokens > cut and not keep}
        if not aborted:
            return group, aborted
        tokens = tuple(cut if i in aborted else t for i, t in enumerate(group.response_tokens))
        truncated = tuple(i in aborted or t for i, t in enumerate(group.truncated))
        return replace(group, response_tokens=tokens, truncated=truncated), aborted
