"""How a training model splits into pipeline chunks and shards its state over data-parallel ranks, and what that
costs one GPU: ZeRO/FSDP weight gathers and gradient reductions per layer unit, the backward pass's overlap of them,
and the optimizer step (the model of `rlsim.costs.training`'s notes)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rlsim.costs.collectives import Op
from rlsim.costs.compute import GPURates
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.lora import adapter_params
from rlsim.costs.memo import Memo
from rlsim.costs.training_groups import GroupCollectives
from rlsim.costs.training_time import TrainingTime
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS, LayerKind

# Bytes per element moved in data-parallel collectives. Weights are gathered in bf16 (FSDP MixedPrecision param_dtype and
# Megatron's distributed optimizer both gather bf16); gradients are reduced in fp32: verl's FSDP workers default
# reduce_dtype to fp32 (verl/workers/fsdp_workers.py), and Megatron "accumulate[s] and all-reduce[s] gradients in fp32
# for bfloat16 data type" unless --grad-reduce-in-bf16 (megatron/training/arguments.py).
PARAM_GATHER_BYTES = 2
GRAD_REDUCE_BYTES = 4

# Mixed-precision Adam streams, per parameter of the local shard, the fp32 master weight, fp32 gradient and the two fp32
# moments in (16 bytes) and the master weight and moments out plus the bf16 working copy (14 bytes): the state layout of
# arXiv 1910.02054 §3.1, each tensor touched once as in a fused (multi-tensor) Adam kernel.
ADAM_BYTES_PER_PARAM = 30
# Gradient clipping reads every fp32 gradient for the norm, then reads and writes it to scale it.
CLIP_BYTES_PER_PARAM = 12
# Offloaded optimizer state (fp32 master, m, v) streams host → GPU for the step and back.
OFFLOADED_OPTIMIZER_BYTES = 12
NORM_ALL_REDUCE_BYTES = 4  # the squared gradient norm, one fp32 scalar


@dataclass(frozen=True)
class BackwardOverlap:
    """What a chunk's backward exposes around its layers' compute, by layout: the first gather (hidden behind the
    head), each layer's overlapping communication with that layer's kind (layers last to first), and what runs
    after the last layer (its reduce, the root unit's, the offloaded gradients' copy to host)."""

    first_gather: float
    comms: tuple[tuple[float, LayerKind], ...]
    after: float


@dataclass(frozen=True)
class ForwardGathers:
    """ZeRO-3's weight gathers in a chunk's forward: what is exposed up front (the root unit and the first layer, gathered
    before any compute) and each layer kind's gather (each later one hides behind the previous layer's compute)."""

    up_front: float
    of_kind: dict[LayerKind, float]


class ShardPricing:
    """The model chunks of `spec` under `layout` and the data-parallel traffic and optimizer step of each."""

    __slots__ = ("rates", "layout", "collectives", "chunks", "chunk_layers", "kind_counts", "adjacent_kinds",
                 "unit_params", "root_params", "unit_trained", "root_trained", "dense_shards", "expert_dp_degree",
                 "forward_gathers", "backward_overlap", "optimizer_step")

    def __init__(self, spec: ModelSpec, rates: GPURates, layout: TrainingLayout, collectives: GroupCollectives,
                 head: Literal["lm", "value"]):
        self.rates, self.layout, self.collectives = rates, layout, collectives
        self.chunks = chunks = layout.pp * layout.virtual_pipeline_stages
        self.dense_shards = layout.dp * layout.cp
        self.expert_dp_degree = expert_dp_degree(layout)
        # Layer kinds of each model chunk (stage chunk % pp); layers split as evenly as possible, earlier chunks larger.
        kinds = spec.layer_kinds
        base, extra = divmod(len(kinds), chunks)
        starts = [chunk * base + min(chunk, extra) for chunk in range(chunks)]
        self.chunk_layers = tuple(kinds[start:start + base + (1 if chunk < extra else 0)]
                                  for chunk, start in enumerate(starts))
        # Layers of each kind in a chunk, kinds in order of first appearance; how often each (kind, next kind) occurs.
        self.kind_counts: tuple[dict[LayerKind, int], ...] = tuple(_counts(layers) for layers in self.chunk_layers)
        self.adjacent_kinds: tuple[dict[tuple[LayerKind, LayerKind], int], ...] = tuple(
            _counts(zip(layers[:-1], layers[1:], strict=True)) for layers in self.chunk_layers)
        # (dense, routed-expert) parameters of one layer of each kind on this GPU before ZeRO sharding.
        self.unit_params: dict[LayerKind, tuple[float, float]] = {}
        for kind in LAYER_KINDS:
            if spec.layer_count(kind):
                params = spec.layer_params(kind)
                routed = sum(v for name, v in params.items() if name.startswith("mlp.experts"))
                self.unit_params[kind] = ((sum(params.values()) - routed) / layout.tp, routed / layout.ep)
        self.root_params = tuple(_root_params(spec, layout, head, chunk, chunks) for chunk in range(chunks))
        # What trains, and so has gradients to reduce and state to step: every parameter, or under LoRA the adapters
        # of each layer alone (the embedding, norms and head frozen).
        self.unit_trained, self.root_trained = self.unit_params, self.root_params
        if layout.lora_rank:
            self.unit_trained = {kind: (dense / layout.tp, expert / layout.ep) for kind in self.unit_params
                                 for dense, expert in [adapter_params(spec, kind, layout.lora_rank)]}
            self.root_trained = tuple(0.0 for _ in range(chunks))
        # Functions of the layout alone, asked for every micro-batch (the gathers, the overlap) and every update (the
        # step).
        self.forward_gathers: Memo[int, ForwardGathers] = Memo(self._price_forward_gathers)
        self.backward_overlap: Memo[tuple[int, bool], BackwardOverlap] = Memo(self._price_backward_overlap)
        self.optimizer_step: Memo[int, TrainingTime] = Memo(self._price_optimizer_step)

    def gather(self, dense: float, expert: float) -> float:
        """All-gather of a unit's bf16 weights across the ranks sharding them (plus its host copy when offloaded)."""
        c, seconds = self.collectives, 0.0
        if dense and c.dp is not None:
            seconds += c.dp("all_gather", PARAM_GATHER_BYTES * dense)
        if expert and c.expert_dp is not None:
            seconds += c.expert_dp("all_gather", PARAM_GATHER_BYTES * expert)
        if self.layout.offload_params:
            assert c.host is not None
            seconds += c.host(PARAM_GATHER_BYTES * (dense / self.dense_shards + expert / self.expert_dp_degree))
        return seconds

    def reduce(self, dense: float, expert: float) -> float:
        """Gradient reduction of a unit: reduce-scatter under ZeRO ≥ 1, all-reduce without ZeRO."""
        c, seconds = self.collectives, 0.0
        op: Op = "reduce_scatter" if self.layout.zero_stage >= 1 else "all_reduce"
        if dense and c.dp is not None:
            seconds += c.dp(op, GRAD_REDUCE_BYTES * dense)
        if expert and c.expert_dp is not None:
            seconds += c.expert_dp(op, GRAD_REDUCE_BYTES * expert)
        return seconds

    def params_of(self, chunks: Sequence[int], *, trained: bool = False) -> tuple[float, float]:
        """(dense, routed-expert) parameters of model chunks on one GPU, before ZeRO sharding; `trained`: those that
        train (all of them but under LoRA)."""
        root, units = (self.root_trained, self.unit_trained) if trained else (self.root_params, self.unit_params)
        dense = expert = 0.0
        for chunk in chunks:
            dense += root[chunk]
            for kind in self.chunk_layers[chunk]:
                d, e = units[kind]
                dense += d
                expert += e
        return dense, expert

    def _price_forward_gathers(self, chunk: int) -> ForwardGathers:
        """ZeRO-3's weight gathers in a chunk's forward (`forward_gathers[chunk]`)."""
        gather_of = {kind: self.gather(*self.unit_params[kind]) for kind in self.kind_counts[chunk]}
        root = self.root_params[chunk]
        up_front = (self.gather(root, 0.0) if root else 0.0) + gather_of[self.chunk_layers[chunk][0]]
        return ForwardGathers(up_front, gather_of)

    def _price_backward_overlap(self, key: tuple[int, bool]) -> BackwardOverlap:
        """The communication a chunk's backward overlaps with its layers (`backward_overlap[chunk, reduce_gradients]`)."""
        chunk, reduce_gradients = key
        order = tuple(reversed(self.chunk_layers[chunk]))
        # One gather and one reduce per layer kind: every layer of a kind moves the same bytes.
        gather_of = {kind: self.gather(*self.unit_params[kind]) if self.layout.zero_stage >= 3 else 0.0
                     for kind in self.kind_counts[chunk]}
        reduce_of = {kind: self.reduce(*self.unit_trained[kind]) if reduce_gradients else 0.0
                     for kind in self.kind_counts[chunk]}
        gathers = [gather_of[kind] for kind in order]
        reduces = [reduce_of[kind] for kind in order]
        root_reduce = self.reduce(self.root_trained[chunk], 0.0) if reduce_gradients else 0.0
        after = root_reduce
        if self.layout.zero_stage <= 1 and not self.layout.overlap_grad_reduce:
            # Reduced after the backward pass, every layer's gradients at once (verl's Megatron DDP).
            after += sum(reduces)
            reduces = [0.0] * len(order)
        # While layer i computes, the next layer's gather and the previous layer's reduce-scatter run.
        comms = tuple(((gathers[i + 1] if i + 1 < len(order) else 0.0) + (reduces[i - 1] if i > 0 else 0.0), kind)
                      for i, kind in enumerate(order))
        after += reduces[-1]
        if self.layout.offload_params and reduce_gradients:
            # The gradient shards go to host memory, where the offloaded weights live.
            assert self.collectives.host is not None
            dense, expert = self.params_of([chunk], trained=True)
            after += self.collectives.host(GRAD_REDUCE_BYTES * (dense / self.dense_shards
                                                                + expert / self.expert_dp_degree))
        return BackwardOverlap(gathers[0], comms, after)

    def _price_optimizer_step(self, stage: int) -> TrainingTime:
        """Gradient clipping and Adam over the parameters this GPU updates, then ZeRO-1/2's weight all-gather."""
        layout, c = self.layout, self.collectives
        dense, expert = self.params_of(range(stage, self.chunks, layout.pp), trained=True)
        if layout.zero_stage >= 1:
            local = dense / self.dense_shards + expert / self.expert_dp_degree
        else:
            local = dense + expert
        seconds = self.rates.memory_seconds(local * (ADAM_BYTES_PER_PARAM + CLIP_BYTES_PER_PARAM))
        if layout.offload_optimizer:
            assert c.host is not None
            seconds += 2 * c.host(OFFLOADED_OPTIMIZER_BYTES * local)
        exposed = 0.0
        # The global gradient norm: a scalar summed over every group that splits the parameters.
        for group in (c.dp, c.tp, c.pp, c.expert_dp, c.ep):
            if group is not None:
                exposed += group("all_reduce", NORM_ALL_REDUCE_BYTES)
        if layout.zero_stage in (1, 2):
            exposed += self.gather(dense, expert)
        return TrainingTime(optimizer=seconds, exposed_collective=exposed)


def expert_dp_degree(layout: TrainingLayout) -> int:
    """Ranks holding the same routed experts: tp·cp·dp / ep."""
    return max(1, layout.tp * layout.cp * layout.dp // layout.ep)


def _counts(items) -> dict:
    """How often each item occurs, items in order of first appearance."""
    counts: dict = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def _root_params(spec: ModelSpec, layout: TrainingLayout, head: str, chunk: int, chunks: int) -> float:
    """Embedding (first chunk) and final norm + output head (last chunk) parameters on this GPU."""
    arch = spec.architecture
    params = 0.0
    if chunk == 0:
        params += spec.vocab_matrix_params
    if chunk == chunks - 1:
        tied = arch.tie_word_embeddings and chunks == 1
        head_params = 0 if tied else (spec.vocab_matrix_params if head == "lm" else arch.hidden_size)
        params += head_params + arch.hidden_size
    return params / layout.tp
