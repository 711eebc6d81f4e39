"""Time of training work on one GPU: micro-batch forward and backward passes, recompute, exposed communication, pipeline
bubbles and the optimizer step, under tensor (TP), pipeline (PP), context (CP), expert (EP) and data parallelism with
FSDP/ZeRO sharding. Pure functions of (model, GPU rates, layout, collective costs); SI units; no SimPy.

What a micro-batch costs, layer by layer (one GPU; T = the micro-batch's tokens / cp):

* **GEMMs** through `GPURates.gemm_seconds` with M = T and the weight split by TP (column-parallel Q/K/V, gate and up
  split N, row-parallel o_proj and down split K). The backward pass runs two GEMMs per forward GEMM (input gradient
  and weight gradient) with the same FLOPs. Routed experts are one grouped GEMM per projection over the tokens routed to
  this GPU's experts (T·top-k assignments spread over E/ep experts, assuming balanced routing); the expert weights
  read are those of the experts touched (`MoE.experts_touched`).
* **Attention** (FlashAttention, causal, per packed sequence): FLOPs quadratic in each sequence's own length, split by
  tp·cp, at a fraction of the GEMM rate measured for the kernel the backend uses (`ATTENTION_EFFICIENCY`).
* **Elementwise work** (RMSNorm, RoPE, SwiGLU, residual adds, MoE permutation, log-softmax over the vocabulary) is
  memory-bound: bytes per element counted from the implementation each backend runs (`ELEMENTWISE_BYTES`; for the
  log-softmax, the kernel the framework runs: `LOGPROB_BYTES`), streamed at `GPURates.memory_seconds`.
* **Recompute**: full recompute re-runs every layer's forward pass (not the output head) during the backward pass;
  selective recompute (Megatron's core-attention checkpointing) re-runs the attention kernel only.
* **TP** with sequence parallelism (on with TP in Megatron-Core): per layer 2 all-gathers and 2 reduce-scatters of the
  T·h activations forward and the same backward, all exposed (Megatron only overlaps them with --tp-comm-overlap,
  which is off by default). **EP**: all-to-all dispatch and combine per MoE layer, forward and backward, exposed.
  **CP**: Ulysses all-to-alls of Q/K/V and of the output (FSDP backends, as verl) exposed; Megatron's ring attention
  passes K/V blocks cp−1 times per layer, overlapped with the attention of the previous block.
* **Data parallel**: ZeRO-3/FSDP all-gathers each layer's weights before its forward and again before its backward
  (weights are resharded after forward), and reduce-scatters its gradients after its backward, on every micro-batch.
  FSDP prefetches one unit ahead, so a layer's communication overlaps the previous layer's compute: exposed =
  Σ max(0, comm_i − compute_(i−1)) plus the first gather and the last reduce-scatter, which nothing hides. ZeRO-2
  reduce-scatters gradients every micro-batch the same way; ZeRO-0/1 reduce once per mini-batch, during the last
  micro-batch's backward, layer by layer with the same overlap rule (the effect of PyTorch DDP buckets and Megatron's
  --overlap-grad-reduce, at layer granularity) or, without that overlap (`overlap_grad_reduce: false`, verl's Megatron
  workers), all after it; ZeRO-1/2 all-gather the updated weights after the optimizer step.
* **Pipeline**: 1F1B (and Megatron's interleaved schedule with v model chunks per stage) is played out op by op, so the
  wall time of unequal micro-batches is exact (a framework that pads every micro-batch to one shape for the pipeline
  passes `pad_to`: the padding runs through the GEMMs, elementwise work, head and sends, not attention); with equal
  ones it is (m + p − 1)(t_f + t_b), and the bubble is (p − 1)/v of one micro-batch's forward and backward
  (arXiv 2104.04473 §2.2). Point-to-point sends of activations and gradients between stages are exposed.
* **Optimizer**: Adam over the local shard, memory-bound (`ADAM_BYTES_PER_PARAM`), after gradient clipping (one pass over
  the gradients plus a scalar all-reduce per parallel group).

Not modelled: the token embedding's lookup and its gradient (a few bytes per token), CPU launch overheads, slow-down of
compute kernels that share the GPU with overlapped NCCL kernels.

The parts, each in its own module: `training_layers` (one layer and the head), `training_shards` (model chunks,
ZeRO/FSDP traffic, the optimizer step), `training_pipeline` (the schedule), `training_groups` (the collectives) and
`training_time` (the results). `TrainingCosts` composes them and prices whole passes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

import numpy as np

from rlsim.costs.compute import GPURates, Tokens
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memo import Memo
from rlsim.costs.rank_steps import RankSteps
from rlsim.costs.training_groups import Collective, GroupCollectives
from rlsim.costs.training_layers import PRICE_AHEAD_MIN_COUNTS, LayerPricing, causal_pairs, positive_part
from rlsim.costs.training_pipeline import finish, pipeline_makespan, run_pipeline
from rlsim.costs.training_shards import (
    ADAM_BYTES_PER_PARAM,
    CLIP_BYTES_PER_PARAM,
    ShardPricing,
    expert_dp_degree,
)
from rlsim.costs.training_time import TRAINING_TIME_FIELDS, LayerTime, PipelineTime, TrainingTime, sum_by_kind
from rlsim.hardware import GPUProfile
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS, LayerKind

# Names other modules import from here: the training cost model's public face.
__all__ = ["ADAM_BYTES_PER_PARAM", "CLIP_BYTES_PER_PARAM", "Collective", "GroupCollectives", "LayerTime", "PipelineTime",
           "TrainingCosts", "TrainingTime", "model_training_flops", "pipeline_makespan", "pipeline_pad_to",
           "training_rates"]

# One micro-batch's ops: each chunk's forward and (unless a forward-only pass) backward.
MicroBatchOps = tuple[tuple[TrainingTime, ...], tuple[TrainingTime, ...]]

# Micro-batch shapes remembered per cost model: more than an async step of a thousand GPUs prices (~500), few enough
# that a thousand-step run's memory does not grow with its steps.
MICRO_BATCH_MEMO_LIMIT = 16_384


def training_rates(gpu: GPUProfile, efficiency: float) -> GPURates:
    """What training kernels run at on `gpu` within a real step: its BF16 kernel rates × `efficiency`
    (`framework.kernel_efficiency(backend)`)."""
    return GPURates.from_profile(gpu, "bf16").sustained(efficiency)


def pipeline_pad_to(layout: TrainingLayout, micro_batches: Sequence[Sequence[int]]) -> int:
    """Tokens every micro-batch of a rank's batch runs at: the longest of them when the pipeline pads packed
    micro-batches to one shape (`TrainingLayout.pp_pads_micro_batches`, pp > 1), else 0 (each its own length)."""
    if layout.pp == 1 or not layout.pp_pads_micro_batches or not micro_batches:
        return 0
    return max(sum(mb) for mb in micro_batches)


def model_training_flops(spec: ModelSpec, sequence_lengths: Sequence[int]) -> float:
    """Model FLOPs of training on these sequences: 3 × the causal forward FLOPs (6·N·tokens + attention), no recompute."""
    return 3.0 * sum(spec.forward_flops(n) for n in sequence_lengths)


@dataclass(frozen=True)
class TrainingCosts:
    """Training costs of `spec` on GPUs with `rates`, laid out as `layout`, communicating through `collectives`.

    `head` is "lm" for the policy and the reference model (log-probabilities over the vocabulary) and "value" for a
    critic (one scalar per token).
    """

    spec: ModelSpec
    rates: GPURates
    layout: TrainingLayout
    collectives: GroupCollectives
    head: Literal["lm", "value"] = "lm"
    _layers: LayerPricing = field(init=False, repr=False, compare=False)
    _shards: ShardPricing = field(init=False, repr=False, compare=False)
    # (tokens, pad_to, causal pairs, reduce_gradients) -> the micro-batch's ops (`_micro_batch_ops`); new keys keep
    # coming step after step (token counts differ), so the memo is bounded.
    _micro_batch_memo: Memo[tuple[int, int, float, bool | None], MicroBatchOps] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        layout = self.layout
        c = self.collectives
        needed = {"tp": layout.tp > 1, "cp": layout.cp > 1, "ep": layout.ep > 1, "pp": layout.pp > 1,
                  "dp": layout.dp * layout.cp > 1,
                  "expert_dp": self.spec.routed_expert_params > 0 and expert_dp_degree(layout) > 1,
                  "host": layout.offload_params or layout.offload_optimizer}
        missing = [name for name, need in needed.items() if need and getattr(c, name) is None]
        if missing:
            raise ValueError(f"the layout needs collective costs for the {', '.join(missing)} group(s)")
        chunks = layout.pp * layout.virtual_pipeline_stages
        if self.spec.architecture.num_hidden_layers < chunks:
            raise ValueError(f"{self.spec.architecture.num_hidden_layers} layers cannot fill {chunks} pipeline chunks")
        parts = {"_layers": LayerPricing(self.spec, self.rates, layout, c, self.head),
                 "_shards": ShardPricing(self.spec, self.rates, layout, c, self.head),
                 "_micro_batch_memo": Memo(self._price_micro_batch, limit=MICRO_BATCH_MEMO_LIMIT)}
        for name, part in parts.items():
            object.__setattr__(self, name, part)

    # ---- one layer ----------------------------------------------------------------------------------------------

    def layer_forward(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int = 0) -> LayerTime:
        """Forward pass of one layer of `kind` over a micro-batch of packed sequences, padded up to `pad_to` tokens
        (the padding runs through everything but attention)."""
        layers = self._layers
        return layers.layer(kind, layers.tokens(sequence_lengths, pad_to), causal_pairs(sequence_lengths),
                            backward=False)

    def layer_backward(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int = 0) -> LayerTime:
        """Backward pass of one layer (input and weight gradients), recompute excluded."""
        layers = self._layers
        return layers.layer(kind, layers.tokens(sequence_lengths, pad_to), causal_pairs(sequence_lengths),
                            backward=True)

    def layer_recompute(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int = 0, *,
                        forward: LayerTime | None = None) -> LayerTime:
        """What activation recompute re-runs for one layer during the backward pass; `forward`: the layer's forward
        time over the same micro-batch, when already priced."""
        layers = self._layers
        return layers.recompute(kind, layers.tokens(sequence_lengths, pad_to), causal_pairs(sequence_lengths), forward)

    def head_time(self, sequence_lengths: Sequence[int], *, backward: bool, pad_to: int = 0) -> LayerTime:
        """Final norm, output head and (for "lm") log-softmax over the vocabulary, on the last pipeline stage."""
        return self._layers.head_time(self._layers.tokens(sequence_lengths, pad_to), backward=backward)

    def chunk_layers(self, chunk: int) -> tuple[LayerKind, ...]:
        """Layer kinds of model chunk `chunk` (stage chunk % pp); layers split as evenly as possible, earlier chunks larger."""
        return self._shards.chunk_layers[chunk]

    # ---- whole passes -------------------------------------------------------------------------------------------

    def update(self, micro_batches: Sequence[Sequence[int]], pad_to: int = 0) -> PipelineTime:
        """One optimizer step on one data-parallel rank: forward and backward of every micro-batch, then the step.

        `micro_batches` are this rank's micro-batches, each a list of packed sequence lengths (whole sequences, before
        the CP split); each runs padded up to `pad_to` tokens (`TrainingLayout.pp_pads_micro_batches`).
        """
        if not micro_batches:
            raise ValueError("an update needs at least one micro-batch")
        self.price_ahead(micro_batches, pad_to, backward=True)
        zero = self.layout.zero_stage
        forward, backward = [], []
        for index, lengths in enumerate(micro_batches):
            # ZeRO-2/3 reduce gradients on every micro-batch; ZeRO-0/1 once, under the last micro-batch's backward.
            reduce_now = zero >= 2 or index == len(micro_batches) - 1
            f_ops, b_ops = self._micro_batch_ops(lengths, pad_to, reduce_now)
            forward.append(f_ops)
            backward.append(b_ops)
        stages = run_pipeline(forward, backward, self.layout.pp)
        steps = [self.optimizer_step(stage) for stage in range(self.layout.pp)]
        return finish(stages, steps)

    def micro_step(self, lengths: Sequence[int]) -> TrainingTime:
        """Forward and backward of one micro-batch on a single-stage rank, its gradients reduced as ZeRO-2/3 do after
        every micro-batch: the unit FSDP's ranks run in lock step (`rlsim.sim.trainer`), with no optimizer step."""
        if self._shards.chunks != 1:
            raise ValueError(f"a lock-step micro-batch runs on one pipeline stage, not {self._shards.chunks} model chunks")
        forward, backward = self._micro_batch_ops(lengths, 0, True)
        return TrainingTime.sum((*forward, *backward))

    def micro_steps(self, micro_batches: Sequence[Sequence[int]]) -> TrainingTime:
        """`micro_step` of every micro-batch at once: one `TrainingTime` whose fields are arrays, element i that of
        micro-batch i to the bit. Priced over numpy arrays of the micro-batches' shapes when there are many (a lock-step
        update of a large batch has thousands), else one by one."""
        if len(micro_batches) < PRICE_AHEAD_MIN_COUNTS:
            steps = [self.micro_step(lengths) for lengths in micro_batches]
            columns: list[Tokens] = [np.array([getattr(t, name) for t in steps], dtype=np.float64)
                                     for name in TRAINING_TIME_FIELDS]
            return TrainingTime(*columns)
        if self._shards.chunks != 1:
            raise ValueError(f"a lock-step micro-batch runs on one pipeline stage, not {self._shards.chunks} model chunks")
        totals, pairs = micro_batch_shapes(micro_batches)
        forward, backward = self._micro_batch_prices(self._tokens_on_gpu(totals, 0), pairs, True)
        step = TrainingTime.sum((*forward, *backward))
        fields: list[Tokens] = [np.broadcast_to(getattr(step, name), totals.shape) for name in TRAINING_TIME_FIELDS]
        return TrainingTime(*fields)

    def forward_pass(self, micro_batches: Sequence[Sequence[int]], pad_to: int = 0) -> PipelineTime:
        """A forward-only pass over micro-batches (each padded up to `pad_to` tokens): old-policy or reference
        log-probs ("lm" head), critic values ("value" head). No recompute, no backward, no optimizer; FSDP still
        gathers weights layer by layer."""
        if not micro_batches:
            raise ValueError("a forward pass needs at least one micro-batch")
        self.price_ahead(micro_batches, pad_to, backward=False)
        forward = [self._micro_batch_ops(lengths, pad_to, None)[0] for lengths in micro_batches]
        stages = run_pipeline(forward, None, self.layout.pp)
        return finish(stages, [TrainingTime()] * self.layout.pp)

    def forward_passes(self, per_rank: Sequence[Sequence[Sequence[int]]]) -> list[PipelineTime | None]:
        """`forward_pass` over each rank's micro-batches, unpadded (None for a rank without any). A model that runs as
        one chunk is priced for every rank at once over numpy arrays when the micro-batches are many: one stage runs
        its ops back to back, so its busy seconds and its makespan are its ops' seconds added in order, as the
        pipeline schedule adds them (`run_pipeline`), here along each rank's row of a ranks × micro-batches table."""
        micro_batches = [lengths for mbs in per_rank for lengths in mbs]
        if self._shards.chunks != 1 or len(micro_batches) < PRICE_AHEAD_MIN_COUNTS:
            self.price_ahead(micro_batches, backward=False)
            return [self.forward_pass(mbs) if mbs else None for mbs in per_rank]
        totals, pairs = micro_batch_shapes(micro_batches)
        (ops,), _ = self._micro_batch_prices(self._tokens_on_gpu(totals, 0), pairs, None)
        grid = RankSteps([len(mbs) for mbs in per_rank])
        busy = [grid.added(grid.table(getattr(ops, name))).tolist() for name in TRAINING_TIME_FIELDS]
        makespans = grid.added(grid.table(ops.total)).tolist()
        passes: list[PipelineTime | None] = []
        for rank, mbs in enumerate(per_rank):
            if not mbs:
                passes.append(None)
                continue
            stage = TrainingTime(*(seconds[rank] for seconds in busy))
            stage = stage + TrainingTime(pipeline_bubble=max(0.0, makespans[rank] - stage.total))
            passes.append(finish([stage], [TrainingTime()]))
        return passes

    def price_ahead(self, micro_batches: Sequence[Sequence[int]], pad_to: int = 0, *, backward: bool) -> None:
        """Price these micro-batches' ops (`_micro_batch_ops`: forward-only, or forward and backward reducing gradients
        as ZeRO-2/3 do after each, or as ZeRO-0/1 do before the last) for all of them at once, over numpy arrays of
        their token counts and causal pairs: a pass's micro-batches have thousands of distinct shapes. Changes no result,
        only how fast the micro-batches are priced after it."""
        reduce_gradients = (self.layout.zero_stage >= 2) if backward else None
        memo = self._micro_batch_memo
        keys = [key for key in dict.fromkeys((sum(lengths), pad_to, causal_pairs(lengths), reduce_gradients)
                                             for lengths in micro_batches) if key not in memo]
        if len(keys) < PRICE_AHEAD_MIN_COUNTS:
            return
        tokens = self._tokens_on_gpu(np.array([total for total, _, _, _ in keys], dtype=np.float64), pad_to)
        pairs = np.array([key[2] for key in keys], dtype=np.float64)
        forward, backward_ops = self._micro_batch_prices(tokens, pairs, reduce_gradients)
        per_chunk_forward = [_each_element(ops, len(keys)) for ops in forward]
        per_chunk_backward = [_each_element(ops, len(keys)) for ops in backward_ops]
        memo.remember((key, (tuple(chunk[i] for chunk in per_chunk_forward),
                             tuple(chunk[i] for chunk in per_chunk_backward))) for i, key in enumerate(keys))

    def _tokens_on_gpu(self, total: Tokens, pad_to: int) -> Tokens:
        """Tokens of a micro-batch of `total` tokens, padded up to `pad_to`, on one GPU of its CP group (of each of an
        array of totals, element by element)."""
        if isinstance(total, np.ndarray):
            return np.maximum(total, float(pad_to)) / self.layout.cp
        return max(total, pad_to) / self.layout.cp

    def _micro_batch_ops(self, lengths: Sequence[int], pad_to: int, reduce_gradients: bool | None) -> MicroBatchOps:
        """Each chunk's forward op over a micro-batch and, unless `reduce_gradients` is None (a forward-only pass), its
        backward op. A micro-batch enters them only through its tokens and its attention's causal pairs, so equal
        ones are priced once (an async run prices tens of thousands of micro-batches, many alike)."""
        return self._micro_batch_memo[sum(lengths), pad_to, causal_pairs(lengths), reduce_gradients]

    def _price_micro_batch(self, key: tuple[int, int, float, bool | None]) -> MicroBatchOps:
        total, pad_to, pairs, reduce_gradients = key
        return self._micro_batch_prices(self._tokens_on_gpu(total, pad_to), pairs, reduce_gradients)

    def _micro_batch_prices(self, tokens: Tokens, pairs: Tokens, reduce_gradients: bool | None) -> MicroBatchOps:
        """`_micro_batch_ops` of a micro-batch of `tokens` tokens on this GPU and `pairs` causal pairs, or of arrays of
        them (then each op's fields are arrays, element by element the scalar prices)."""
        layers, chunks = self._layers, self._shards.chunks
        kinds = [kind for kind in LAYER_KINDS if self.spec.layer_count(kind)]
        f_layers = {kind: layers.layer(kind, tokens, pairs, backward=False) for kind in kinds}
        forward = tuple(self._chunk_forward(g, tokens, f_layers) for g in range(chunks))
        if reduce_gradients is None:
            return forward, ()
        b_layers = {kind: layers.layer(kind, tokens, pairs, backward=True) for kind in kinds}
        r_layers = {kind: layers.recompute(kind, tokens, pairs, f_layers[kind]) for kind in kinds}
        backward = tuple(self._chunk_backward(g, tokens, b_layers, r_layers, reduce_gradients=reduce_gradients)
                         for g in range(chunks))
        return forward, backward

    def _chunk_forward(self, chunk: int, tokens: Tokens, layers: dict[LayerKind, LayerTime]) -> TrainingTime:
        """One forward op of a pipeline chunk: its layers, the head on the last chunk, FSDP gathers, the send onward."""
        shards = self._shards
        counts = shards.kind_counts[chunk]
        total = sum_by_kind(counts, layers)
        last = chunk == shards.chunks - 1
        if last:
            total = total + self._layers.head_time(tokens, backward=False)
        exposed = total.collective
        if self.layout.zero_stage >= 3:
            # Root unit and first layer gathered up front; each later gather hides behind the previous layer.
            gathers = shards.forward_gathers[chunk]
            gather_of = gathers.of_kind
            exposed += gathers.up_front
            # Each gather hides behind the previous layer's compute; pairs of layer kinds repeat, so count them.
            compute = {kind: layers[kind].compute for kind in gather_of}
            exposed += sum(count * positive_part(gather_of[later] - compute[earlier])
                           for (earlier, later), count in shards.adjacent_kinds[chunk].items())
        if not last:
            exposed += self._layers.send(tokens)
        return TrainingTime(forward=total.compute, exposed_collective=exposed)

    def _chunk_backward(self, chunk: int, tokens: Tokens, layers: dict[LayerKind, LayerTime],
                        recomputed: dict[LayerKind, LayerTime], *, reduce_gradients: bool) -> TrainingTime:
        """One backward op of a pipeline chunk: recompute, gradients, FSDP gathers and gradient reduction, send back."""
        shards = self._shards
        counts = shards.kind_counts[chunk]
        last = chunk == shards.chunks - 1
        head = self._layers.head_time(tokens, backward=True) if last else LayerTime()
        backward = sum_by_kind(counts, layers) + head
        recompute = sum_by_kind(counts, recomputed)
        exposed = backward.collective + recompute.collective
        plan = shards.backward_overlap[chunk, reduce_gradients]
        # Layers run last to first. The first gather hides behind the head's backward (if this chunk has it); while
        # layer i computes, the next layer's gather and the previous layer's reduce-scatter run.
        exposed += positive_part(plan.first_gather - head.compute)
        window = {kind: layers[kind].compute + recomputed[kind].compute for kind in counts}
        if isinstance(tokens, np.ndarray):
            for comm, kind in plan.comms:
                exposed = exposed + positive_part(comm - window[kind])  # adds 0.0 where the scalar path adds nothing
        else:
            for comm, kind in plan.comms:  # a comparison, not max(): one per layer of every micro-batch priced
                beyond = comm - window[kind]
                if beyond > 0.0:
                    exposed += beyond
        exposed += plan.after
        if chunk > 0:
            exposed += self._layers.send(tokens)
        return TrainingTime(backward=backward.compute, recompute=recompute.compute, exposed_collective=exposed)

    # ---- optimizer ----------------------------------------------------------------------------------------------

    def optimizer_step(self, stage: int = 0) -> TrainingTime:
        """Gradient clipping and Adam over the parameters this GPU updates, then ZeRO-1/2's weight all-gather (a
        function of the layout alone, priced once per stage)."""
        return self._shards.optimizer_step[stage]


def micro_batch_shapes(micro_batches: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Each micro-batch's tokens (float) and causal pairs (`causal_pairs`, summed sequence by sequence in the same order,
    so equal to the bit), as numpy arrays."""
    sequences = RankSteps([len(lengths) for lengths in micro_batches])
    lengths = np.fromiter(chain.from_iterable(micro_batches), dtype=np.int64)
    totals = sequences.table(lengths).sum(axis=1)  # whole numbers: exact in any order
    return totals, sequences.added(sequences.table(lengths * (lengths + 1) / 2))


def _each_element(ops: TrainingTime, count: int) -> list[TrainingTime]:
    """An op priced over arrays of `count` micro-batches (a field that depends on none of them may be a number) as one
    `TrainingTime` per micro-batch."""
    fields = [np.broadcast_to(getattr(ops, name), (count,)).tolist() for name in TRAINING_TIME_FIELDS]
    return [TrainingTime(*values) for values in zip(*fields, strict=True)]
