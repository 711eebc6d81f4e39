"""The training stages of `rlsim estimate`: a step's trained sequences at evenly spaced quantiles of their lengths,
split over data-parallel ranks and packed into micro-batches the way the simulated trainer does (`rlsim.sim.trainer`),
each micro-batch priced by `TrainingCosts`; the slowest rank sets the pace.

* Ranks get the sequences longest first, dealt back and forth (a snake draft), which balances them about as well as
  the simulator's default `sorted_greedy` does; a policy that deals in arrival order (`none`) is less even than this.
* Micro-batches are packed first-fit decreasing up to the token budget, or without sequence packing, runs of sequences
  each padded to the batch's longest.
* Pure FSDP (pp = 1, ZeRO ≥ 2) runs its ranks' micro-batches in lock step, the slowest of each micro-step setting it;
  otherwise ranks meet once per optimizer step (or at the end of a forward pass).
* A step's mini-batches are alike (each a slice of a batch in random order), so one is priced and counted as many
  times as the step has optimizer steps.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlsim.config.schema import TrainingPlacement
from rlsim.costs.training import TrainingCosts, pipeline_pad_to

MicroBatches = list[list[int]]


@dataclass(frozen=True)
class TrainedBatch:
    """A step's trained sequence lengths (prompt + response tokens) in a random-like order, and the length every
    sequence is padded to without sequence packing: the batch's expected longest."""

    lengths: tuple[int, ...]
    padded: int

    def mini_batch(self, mini_batches: int) -> tuple[int, ...]:
        return self.lengths[: math.ceil(len(self.lengths) / mini_batches)]


class RankedTraining:
    """A layout's ranks running forward passes and updates over a `TrainedBatch`."""

    def __init__(self, layout: TrainingPlacement, batch: TrainedBatch):
        self.layout, self.batch = layout, batch

    def forward_seconds(self, costs: TrainingCosts) -> float:
        layout = self.layout
        ranks = self._ranks(self.batch.lengths, layout.forward_micro_batch_tokens)
        return max(costs.forward_pass(mbs, pipeline_pad_to(layout, mbs)).seconds for mbs in ranks if mbs)

    def update_seconds(self, costs: TrainingCosts, mini_batches: int, epochs: int) -> tuple[float, int]:
        """Seconds of every optimizer step of the step, and the micro-batches of the busiest rank in each."""
        layout = self.layout
        ranks = [mbs for mbs in self._ranks(self.batch.mini_batch(mini_batches), layout.micro_batch_tokens) if mbs]
        if layout.pp == 1 and layout.zero_stage >= 2:
            steps = max(len(mbs) for mbs in ranks)
            one = costs.optimizer_step(0).total + sum(
                max(costs.micro_step(mbs[i]).total for mbs in ranks if i < len(mbs)) for i in range(steps))
        else:
            one = max(costs.update(mbs, pipeline_pad_to(layout, mbs)).seconds for mbs in ranks)
        return mini_batches * epochs * one, max(len(mbs) for mbs in ranks)

    def _ranks(self, lengths: Sequence[int], per_gpu_tokens: int) -> list[MicroBatches]:
        layout = self.layout
        dp = layout.dp or 1
        shares: list[list[int]] = [[] for _ in range(dp)]
        for i, length in enumerate(sorted(lengths, reverse=True)):
            lap, seat = divmod(i, dp)
            shares[seat if lap % 2 == 0 else dp - 1 - seat].append(length)
        capacity = per_gpu_tokens * layout.cp
        if not layout.sequence_packing:
            per_micro = max(1, capacity // self.batch.padded)
            return [[[self.batch.padded] * len(share[i:i + per_micro]) for i in range(0, len(share), per_micro)]
                    for share in shares]
        return [_first_fit_decreasing(share, capacity) for share in shares]


def _first_fit_decreasing(lengths: list[int], capacity: int) -> MicroBatches:
    """Each sequence, longest first, into the first micro-batch with room (a longer one gets its own)."""
    bins: MicroBatches = []
    room: list[int] = []
    for length in sorted(lengths, reverse=True):
        slot = next((i for i, free in enumerate(room) if free >= length), None)
        if slot is None:
            bins.append([length])
            room.append(capacity - length)
        else:
            bins[slot].append(length)
            room[slot] -= length
    return bins
