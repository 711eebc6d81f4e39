"""The training stages of `rlsim estimate`: a step's trained sequences at evenly spaced quantiles of their lengths,
split over data-parallel ranks and packed into micro-batches the way the simulated trainer does (`rlsim.sim.trainer`),
each micro-batch priced by `TrainingCosts`; the slowest rank sets the pace.

* Every data-parallel rank gets a like share of the batch: its own sequences at evenly spaced quantiles, as the
  simulator's default `sorted_greedy` balances them; one rank is priced for all (a policy that deals in arrival order,
  `none`, leaves ranks less even than this).
* Micro-batches are packed first-fit decreasing up to the token budget, or without sequence packing, runs of sequences
  each padded to the batch's longest.
* Pure FSDP (pp = 1, ZeRO ≥ 2) runs its ranks' micro-batches in lock step, the slowest of each micro-step setting it;
  otherwise ranks meet once per optimizer step (or at the end of a forward pass).
* A step's mini-batches are alike (each a slice of a batch in random order), so one is priced and counted as many
  times as the step has optimizer steps.
A share of the sorted lengths stands for a random one: it leaves out the imbalance between ranks and micro-batches that
random lengths bring, a few per cent of the training stages on the shipped scenarios.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlsim.costs.layout import TrainingLayout
from rlsim.costs.training import TrainingCosts, pipeline_pad_to

MicroBatches = list[list[int]]


@dataclass(frozen=True)
class TrainedBatch:
    """A step's trained sequence lengths (prompt + response tokens), and the length every sequence is padded to
    without sequence packing: the batch's expected longest."""

    lengths: tuple[int, ...]
    padded: int

    def share(self, parts: int) -> list[int]:
        """One of `parts` like shares (a data-parallel rank's, or its mini-batch): every parts-th of the sorted lengths,
        so each share spans the same quantiles."""
        return sorted(self.lengths, reverse=True)[::parts]


class RankedTraining:
    """A layout's ranks running forward passes and updates over a `TrainedBatch`."""

    def __init__(self, layout: TrainingLayout, batch: TrainedBatch):
        self.layout, self.batch = layout, batch

    def forward_seconds(self, costs: TrainingCosts) -> float:
        micro_batches = self._micro_batches(self.batch.share(self.layout.dp), self.layout.forward_micro_batch_tokens)
        return costs.forward_pass(micro_batches, pipeline_pad_to(self.layout, micro_batches)).seconds

    def update_seconds(self, costs: TrainingCosts, mini_batches: int, epochs: int) -> tuple[float, int]:
        """Seconds of every optimizer step of the step, and the micro-batches of a rank in each."""
        layout = self.layout
        share = self.batch.share(layout.dp * mini_batches)
        micro_batches = self._micro_batches(share, layout.micro_batch_tokens)
        if layout.pp == 1 and layout.zero_stage >= 2:
            # Lock step: each micro-step lasts as long as the slowest rank's, and ranks are alike here.
            one = costs.optimizer_step(0).total + sum(costs.micro_step(mb).total for mb in micro_batches)
        else:
            one = costs.update(micro_batches, pipeline_pad_to(layout, micro_batches)).seconds
        return mini_batches * epochs * one, len(micro_batches)

    def _micro_batches(self, lengths: list[int], per_gpu_tokens: int) -> MicroBatches:
        capacity = per_gpu_tokens * self.layout.cp
        if not self.layout.sequence_packing:
            per_micro = max(1, capacity // self.batch.padded)
            return [[self.batch.padded] * len(lengths[i:i + per_micro]) for i in range(0, len(lengths), per_micro)]
        return _first_fit_decreasing(lengths, capacity)


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
