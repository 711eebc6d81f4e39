"""Several data-parallel ranks' micro-batches as one ranks × steps table of seconds, so that a pass over all of them is
priced and added up with numpy instead of micro-batch by micro-batch (`TrainingCosts.forward_passes`, the FSDP lock
step of `rlsim.sim.trainer`); likewise micro-batches' sequences, to add up their attention pairs."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class RankSteps:
    """Ranks holding `counts[r]` micro-batches each, laid out row by row (rank r's micro-batch i at row r, column i);
    a rank with fewer than the most does nothing (zero seconds) in the columns it lacks."""

    __slots__ = ("ranks", "width", "_rows", "_columns")

    def __init__(self, counts: Sequence[int]):
        self.ranks = len(counts)
        self.width = max(counts, default=0)
        self._rows = np.repeat(np.arange(self.ranks), counts)
        self._columns = np.arange(len(self._rows)) - np.repeat(np.cumsum(counts) - counts, counts)

    def table(self, seconds: np.ndarray | float) -> np.ndarray:
        """Seconds of every micro-batch, ranks' micro-batches one after another (or one figure for all) as the table."""
        out = np.zeros((self.ranks, self.width))
        out[self._rows, self._columns] = seconds
        return out

    def added(self, *tables: np.ndarray) -> np.ndarray:
        """Each rank's row of the tables added up from 0.0 in step order, at each step the tables' seconds in turn: the
        same additions, in the same order, as a loop over the steps (an accumulate, which numpy does in order, unlike a
        sum)."""
        terms = np.zeros((self.ranks, 1 + self.width * len(tables)))
        for k, seconds in enumerate(tables):
            terms[:, 1 + k::len(tables)] = seconds
        return np.cumsum(terms, axis=1)[:, -1]
