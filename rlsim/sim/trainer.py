"""The training GPUs: forward-only passes (old log-probs, reference, critic values) and mini-batch updates.

Each batch is split over data-parallel ranks by the `dp_balance` policy and packed into micro-batches (or, without
sequence packing, padded to its longest sequence and cut into micro-batches of equal sequences); a pipeline that needs
one activation shape runs every packed micro-batch of a rank at the rank's longest (`pp_pads_micro_batches`). Ranks then run
in lock step: with pure FSDP (pp = 1, ZeRO ≥ 2) the per-layer collectives of every micro-batch make the slowest rank set
each micro-step; otherwise ranks meet at every optimizer step (and at the end of a forward pass). The waiting of the
faster ranks is recorded as `barrier`. Seconds per rank come from `costs.training.TrainingCosts`.
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import simpy

from rlsim.costs.layout import TrainingLayout
from rlsim.costs.rank_steps import RankSteps
from rlsim.costs.training import PipelineTime, TrainingCosts, pipeline_pad_to
from rlsim.sim.dp_balance import DP_BALANCERS, pack_micro_batches
from rlsim.sim.recorder import Recorder

# Order in which a rank's seconds are laid out on the timeline within one synchronised piece of work.
LABEL_ORDER = ("logprob", "reward_model", "train_forward", "train_backward", "exposed_collective", "pipeline_bubble", "optimizer",
               "barrier")

# Priced passes a trainer remembers: a step's ranks and stages ask for a few hundred at most.
PASS_CACHE_LIMIT = 1_024
# Whole forward passes a trainer remembers: a step runs at most four (old log-probs, reference, values, reward model).
FORWARD_PASS_CACHE_LIMIT = 4


@dataclass(frozen=True)
class TrainingGroup:
    """Where the training job sits: GPUs [first_gpu, first_gpu + gpus) in Megatron rank order (TP fastest, then CP,
    DP, PP), so one data-parallel rank of one pipeline stage is a contiguous block of tp·cp GPUs."""

    first_gpu: int
    layout: TrainingLayout

    @property
    def dp(self) -> int:
        return self.layout.dp

    @property
    def gpus(self) -> int:
        return self.layout.gpus or 0

    def block(self, dp_rank: int, pp_stage: int) -> tuple[int, int]:
        per = self.layout.tp * self.layout.cp
        return self.first_gpu + per * (dp_rank + self.dp * pp_stage), per


class Trainer:
    def __init__(self, env: simpy.Environment, recorder: Recorder, group: TrainingGroup, balance: str,
                 unit_prefix: str = "dp", unit_suffix: str = ""):
        self.env = env
        self.unit_prefix = unit_prefix  # its data-parallel ranks' units are prefix0, prefix1, … (then the suffix)
        self.unit_suffix = unit_suffix
        self.recorder = recorder
        self.group = group
        self.balance = DP_BALANCERS[balance]
        # Priced passes of this step's micro-batches (an identical batch on several ranks is priced once); a key holds
        # every length, so the cache starts afresh beyond PASS_CACHE_LIMIT rather than grow with the run.
        self._cache: dict[tuple, PipelineTime] = {}
        # Each rank's seconds by label of the latest forward passes, by (label, the batch's lengths) with their cost model: a
        # reference that shares the policy's cost model and GPUs (`rlsim.sim.build`) runs the old-log-prob pass's batch
        # again, and its seconds are the same.
        self._forward_passes: dict[tuple, tuple[TrainingCosts, list[list[dict[str, float]]]]] = {}

    def forward_pass(self, stage: str, costs: TrainingCosts, lengths: Sequence[int], *,
                     label: str = "logprob") -> Generator:
        """Old-policy, reference or critic-value pass over the batch (or a reward model's, labelled `reward_model`);
        ranks meet at its end."""
        key = (label, tuple(lengths))
        remembered = self._forward_passes.get(key)
        # The same cost model object, not an equal one: comparing frozen dataclasses field by field costs more than
        # the pass, and an id alone could be a freed model's.
        per_stage = remembered[1] if remembered is not None and remembered[0] is costs else None
        if per_stage is None:
            layout = self.group.layout
            padded, capacity = max(lengths, default=0), layout.forward_micro_batch_tokens
            per_rank = [self._micro_batches(share, padded, capacity) for share in self._split(lengths)]
            if layout.pp == 1:
                times = costs.forward_passes(per_rank)
            else:
                self._price_ahead(costs, per_rank, backward=False)
                times = [self._priced("forward", costs, mbs, pipeline_pad_to(layout, mbs)) for mbs in per_rank]
            per_stage = [[t.stages[s].labels(label) if t else {} for t in times] for s in range(layout.pp)]
            if len(self._forward_passes) >= FORWARD_PASS_CACHE_LIMIT:
                self._forward_passes.clear()
            self._forward_passes[key] = (costs, per_stage)
        yield from self._run(stage, per_stage)

    def update(self, stage: str, costs: TrainingCosts, lengths: Sequence[int], mini_batches: int,
               epochs: int) -> Generator:
        """`epochs` passes of `mini_batches` optimizer steps over the batch (actor or critic update)."""
        size = -(-len(lengths) // mini_batches)
        padded = max(lengths, default=0)
        for _ in range(epochs):
            for start in range(0, len(lengths), size):
                yield from self._optimizer_step(stage, costs, lengths[start:start + size], padded)

    def _optimizer_step(self, stage: str, costs: TrainingCosts, lengths: Sequence[int], padded: int) -> Generator:
        layout = self.group.layout
        per_rank = [self._micro_batches(share, padded, layout.micro_batch_tokens) for share in self._split(lengths)]
        if layout.pp == 1 and layout.zero_stage >= 2:
            yield from self._run(stage, [self._lock_step_micro_batches(costs, per_rank)])
        else:
            self._price_ahead(costs, per_rank, backward=True)
            times = [self._priced("update", costs, mbs, pipeline_pad_to(layout, mbs)) for mbs in per_rank]
            yield from self._run(stage, [[t.stages[s].labels() if t else {} for t in times] for s in range(layout.pp)])

    def _lock_step_micro_batches(self, costs: TrainingCosts, per_rank: list[list[list[int]]]) -> list[dict[str, float]]:
        """pp = 1 with FSDP: micro-step i lasts as long as the slowest rank's micro-batch i; then one optimizer step.

        Every rank's micro-steps are priced at once (`TrainingCosts.micro_steps`) into a ranks × steps table, a rank
        short of micro-batches idle (zero) in the steps it lacks. A rank's seconds of a label are its row added from 0.0
        step by step in order (an accumulate), as a loop over the steps adds them; at the barrier, each step's own
        barrier and then its wait behind the slowest rank."""
        grid = RankSteps([len(mbs) for mbs in per_rank])
        micro = costs.micro_steps([mb for mbs in per_rank for mb in mbs])
        total = grid.table(micro.total)
        tables = {label: [grid.table(seconds)] for label, seconds in micro.labels().items()}
        tables["barrier"].append(total.max(axis=0, initial=0.0) - total)
        by_label = {label: grid.added(*parts).tolist() for label, parts in tables.items()}
        optimizer = costs.optimizer_step(0).labels()
        totals = []
        for rank in range(len(per_rank)):
            labels = dict.fromkeys(LABEL_ORDER, 0.0)
            for label, seconds in by_label.items():
                labels[label] = seconds[rank] + optimizer[label]
            totals.append(labels)
        return totals

    def _price_ahead(self, costs: TrainingCosts, per_rank: list[list[list[int]]], *, backward: bool) -> None:
        """Every rank's micro-batches priced by token count at once (`TrainingCosts.price_ahead`): one rank's are too
        few to pay for numpy, a step's are thousands."""
        by_padding: dict[int, list[list[int]]] = {}
        for micro_batches in per_rank:
            by_padding.setdefault(pipeline_pad_to(self.group.layout, micro_batches), []).extend(micro_batches)
        for pad_to, micro_batches in by_padding.items():
            costs.price_ahead(micro_batches, pad_to, backward=backward)

    def _run(self, stage: str, per_stage: list[list[dict[str, float]]]) -> Generator:
        """Lay each rank's seconds out from now, pad every rank to the slowest with `barrier`, and wait that long."""
        start = self.env.now
        wall = max((sum(labels.values()) for ranks in per_stage for labels in ranks), default=0.0)
        for pp_stage, ranks in enumerate(per_stage):
            for dp_rank, labels in enumerate(ranks):
                first, count = self.group.block(dp_rank, pp_stage)
                unit = f"{self.unit_prefix}{dp_rank}{self.unit_suffix}"
                cursor = start
                for label in LABEL_ORDER:
                    seconds = labels.get(label, 0.0)
                    if seconds > 0:
                        self.recorder.busy(first, count, cursor, cursor + seconds, label, stage, unit=unit)
                        cursor += seconds
                self.recorder.busy(first, count, cursor, start + wall, "barrier", stage, unit=unit)
        yield self.env.timeout(wall)

    def _split(self, lengths: Sequence[int]) -> list[list[int]]:
        return [[lengths[i] for i in indices] for indices in self.balance(lengths, self.group.dp)]

    def _micro_batches(self, lengths: list[int], padded: int, per_gpu: int) -> list[list[int]]:
        """Micro-batches of at most `per_gpu` tokens per GPU, so `per_gpu`·cp over a context-parallel group (verl
        scales ppo_max_token_len_per_gpu so): packed, or without packing runs of sequences each padded to `padded` (the
        batch's longest)."""
        if not lengths:
            return []
        layout = self.group.layout
        capacity = per_gpu * layout.cp
        if layout.sequence_packing:
            return pack_micro_batches(lengths, capacity)
        per_micro = max(1, capacity // padded)
        return [[padded] * len(lengths[i:i + per_micro]) for i in range(0, len(lengths), per_micro)]

    def _priced(self, kind: str, costs: TrainingCosts, micro_batches: list[list[int]],
                pad_to: int = 0) -> PipelineTime | None:
        if not micro_batches:
            return None
        key = (kind, id(costs), pad_to, tuple(tuple(mb) for mb in micro_batches))
        if key not in self._cache:
            if len(self._cache) >= PASS_CACHE_LIMIT:
                self._cache.clear()
            price = costs.update if kind == "update" else costs.forward_pass
            self._cache[key] = price(micro_batches, pad_to)
        return self._cache[key]

