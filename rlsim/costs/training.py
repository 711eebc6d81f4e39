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
  --overlap-grad-reduce, at layer granularity), and ZeRO-1/2 all-gather the updated weights after the optimizer step.
* **Pipeline**: 1F1B (and Megatron's interleaved schedule with v model chunks per stage) is played out op by op, so the
  wall time of unequal micro-batches is exact (a framework that pads every micro-batch to one shape for the pipeline
  passes `pad_to`: the padding runs through the GEMMs, elementwise work, head and sends, not attention); with equal
  ones it is (m + p − 1)(t_f + t_b), and the bubble is (p − 1)/v of one micro-batch's forward and backward
  (arXiv 2104.04473 §2.2). Point-to-point sends of activations and gradients between stages are exposed.
* **Optimizer**: Adam over the local shard, memory-bound (`ADAM_BYTES_PER_PARAM`), after gradient clipping (one pass over
  the gradients plus a scalar all-reduce per parallel group).

Not modelled: the token embedding's lookup and its gradient (a few bytes per token), CPU launch overheads, slow-down of
compute kernels that share the GPU with overlapped NCCL kernels.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Literal

from rlsim.config.schema import TrainingPlacement
from rlsim.costs.collectives import HOST_LINK_EFFICIENCY, Op, collective_time
from rlsim.costs.compute import GPURates
from rlsim.costs.memory import kernel_implementation
from rlsim.hardware import GPUProfile
from rlsim.models import ModelSpec
from rlsim.models.spec import LayerKind
from rlsim.topology import GPU, ClusterTopology, CommGroup

# ---------------------------------------------------------------------------------------------------- constants

# Bytes per element moved in data-parallel collectives. Weights are gathered in bf16 (FSDP MixedPrecision param_dtype and
# Megatron's distributed optimizer both gather bf16); gradients are reduced in fp32: verl's FSDP workers default
# reduce_dtype to fp32 (verl/workers/fsdp_workers.py), and Megatron "accumulate[s] and all-reduce[s] gradients in fp32
# for bfloat16 data type" unless --grad-reduce-in-bf16 (megatron/training/arguments.py).
PARAM_GATHER_BYTES = 2
GRAD_REDUCE_BYTES = 4
ACTIVATION_BYTES = 2  # bf16 activations in TP, CP, EP and pipeline messages

# FlashAttention throughput as a fraction of the GPU's large-GEMM rate, (forward, backward), head dim 128 at 4K tokens on
# H100 SXM, from the FlashAttention-3 paper's benchmarks (arXiv 2407.08608, Fig. 5-6; causal forward, backward) divided
# by H100's 794 TFLOP/s GEMM (reference §2). The FSDP backends run FlashAttention-2 (Hugging Face
# attn_implementation="flash_attention_2", as verl does): 319 and 310 TFLOP/s. Megatron runs TransformerEngine's cuDNN
# fused attention: 518 and 499 TFLOP/s. FlashAttention-2 on A100 reaches 73% of peak (arXiv 2307.08691), ≈0.84 of
# A100's GEMM rate, so for Ampere the FSDP figure is pessimistic.
ATTENTION_EFFICIENCY = {"fsdp": (0.40, 0.39), "megatron": (0.65, 0.63)}
# FlashAttention's backward pass does 2.5× the forward's matmul FLOPs (it recomputes the scores); the benchmark that the
# efficiencies above come from counts them so (flash-attention benchmarks/benchmark_flash_attention.py).
ATTENTION_BACKWARD_FLOPS = 2.5

# Bytes moved per element by memory-bound ops in one forward pass, counted from the kernels each backend runs.
# Eager (Hugging Face modeling_llama/qwen2 run op by op): RMSNorm = to(fp32) 2+4, pow 4+4, mean 4, x·rsqrt 4+4, to(bf16)
# 4+2, ·weight 2+2 → 36; RoPE on Q and K = rotate_half's cat 2+2, ·cos 2+2, ·sin 2+2, add 4+2 → 18; SwiGLU per output
# element = silu 2+2, ·up 4+2 → 10. Fused (Megatron with TransformerEngine): each reads its inputs and writes its output
# once: RMSNorm 2+2, RoPE 2+2, SwiGLU 4+2. A residual add reads two bf16 tensors and writes one (6) in both.
ELEMENTWISE_BYTES = {
    "eager": {"rmsnorm": 36, "rope": 18, "swiglu": 10, "residual": 6},
    "fused": {"rmsnorm": 4, "rope": 4, "swiglu": 6, "residual": 6},
}
# MoE token permutation: each of a token's top-k copies is read and written once on dispatch and once on combine (bf16).
MOE_PERMUTE_BYTES = 8
# The backward pass of an elementwise op reads the output gradient and the op's saved inputs and writes the input
# gradients: 1.5× (unary) to 1.7× (binary) the forward's traffic, plus gradient accumulation into the residual stream.
ELEMENTWISE_BACKWARD_TRAFFIC = 2.0
# Bytes moved per logit (one token × one vocabulary entry of this GPU's shard) to turn the bf16 logits into
# log-probabilities, (forward, backward), by `TrainingPlacement.logprob_kernel`, counted from each implementation:
# * fused: one kernel reads the bf16 logits (2); its backward reads them and writes the gradient in place (2 + 2):
#   flash-attn's cross_entropy_loss, which verl's FSDP workers use when flash-attn is installed
#   (verl/utils/torch_functional.py logprobs_from_logits).
# * fp32_vocab_parallel: Megatron-Core's vocab_parallel_cross_entropy (verl's Megatron workers,
#   verl/utils/megatron/tensor_parallel.py): .float() 2+4, max 4, in-place subtract 4+4, exp 4+4, sum 4, divide 4+4
#   → 38; backward multiplies the saved softmax in place (4+4) and casts the gradient back to bf16 (4+2) → 14.
# * fp32_unfused: NeMo-RL's loss and log-prob passes (nemo_rl/distributed/model_utils.py DistributedLogprob, v0.5):
#   .to(float32) 2+4, amax 4, subtract 4+4, exp 4+4, sum 4, subtract 4+4, softmax kept for the backward pass (exp)
#   4+4 → 46; backward negates and scales the softmax (4+4, 4+4) and casts back (4+2) → 22. (v0.3's backward built a
#   one-hot int64 mask instead and moved about three times as much; the v0.5 count is used for every version.)
LOGPROB_BYTES = {"fused": (2, 4), "fp32_vocab_parallel": (38, 14), "fp32_unfused": (46, 22)}

# Mixed-precision Adam streams, per parameter of the local shard, the fp32 master weight, fp32 gradient and the two fp32
# moments in (16 bytes) and the master weight and moments out plus the bf16 working copy (14 bytes): the state layout of
# arXiv 1910.02054 §3.1, each tensor touched once as in a fused (multi-tensor) Adam kernel.
ADAM_BYTES_PER_PARAM = 30
# Gradient clipping reads every fp32 gradient for the norm, then reads and writes it to scale it.
CLIP_BYTES_PER_PARAM = 12
# Offloaded optimizer state (fp32 master, m, v) streams host → GPU for the step and back.
OFFLOADED_OPTIMIZER_BYTES = 12
NORM_ALL_REDUCE_BYTES = 4  # the squared gradient norm, one fp32 scalar

Collective = Callable[[Op, float], float]
"""Seconds of a collective on one parallel group: op ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
"send_recv") and bytes — all_reduce: the buffer; all_gather: the gathered output; reduce_scatter: its input;
all_to_all: what one rank sends; send_recv: the message."""


@dataclass(frozen=True)
class GroupCollectives:
    """Collective costs on each parallel group a training GPU belongs to. A group of degree 1 needs none.

    dp: ranks holding the same dense weights (dp·cp): ZeRO/FSDP traffic and gradient reduction.
    expert_dp: ranks holding the same routed experts (tp·cp·dp/ep). tp, cp, ep: their groups.
    pp: send_recv to the next pipeline stage, and the all_reduce of the gradient norm across stages.
    host: seconds to copy bytes between host memory and this GPU (offloaded state).
    """

    dp: Collective | None = None
    expert_dp: Collective | None = None
    tp: Collective | None = None
    cp: Collective | None = None
    ep: Collective | None = None
    pp: Collective | None = None
    host: Callable[[float], float] | None = None

    @classmethod
    def on_cluster(cls, topology: ClusterTopology, gpus: Sequence[GPU], layout: TrainingPlacement) -> GroupCollectives:
        """The groups of the first GPU of a training job on `gpus` (in fill order), priced by `collective_time`.

        Ranks follow Megatron-Core's default order, TP fastest, then CP, DP and PP (rank = t + tp·(c + cp·(d + dp·s))),
        so TP stays inside a node. Routed experts use the folded grid (expert TP 1): EP groups are consecutive ranks of
        a stage, expert data parallelism strides over them. Every rank of a regular layout sees groups of the same shape.
        """
        dp = layout.dp or 1
        stage = layout.tp * layout.cp * dp
        if len(gpus) < stage * layout.pp:
            raise ValueError(f"the layout needs {stage * layout.pp} GPUs, {len(gpus)} given")

        def on(ranks: Sequence[int]) -> Collective | None:
            return _priced(topology.group(gpus[r] for r in ranks)) if len(ranks) > 1 else None

        hardware = topology.hardware(gpus[0].pool)
        link = hardware.host_link
        host_rate = link.bytes_per_s * HOST_LINK_EFFICIENCY
        return cls(
            dp=on([layout.tp * j for j in range(layout.cp * dp)]),
            expert_dp=on([layout.ep * j for j in range(stage // layout.ep)]),
            tp=on(range(layout.tp)),
            cp=_ring(topology, [gpus[layout.tp * j] for j in range(layout.cp)]) if layout.cp > 1 else None,
            ep=on(range(layout.ep)),
            pp=_pipeline(topology, [gpus[stage * s] for s in range(layout.pp)]) if layout.pp > 1 else None,
            host=lambda nbytes: link.latency_s + nbytes / host_rate,
        )


def _priced(group: CommGroup) -> Collective:
    """`collective_time` on one communicator, memoised: training asks the same few sizes over and over."""

    @lru_cache(maxsize=256)
    def seconds(op: Op, nbytes: float) -> float:
        return collective_time(op, nbytes, group).seconds

    return seconds


def _ring(topology: ClusterTopology, ring: Sequence[GPU]) -> Collective:
    """Collectives over the whole group; send_recv to the next rank of the ring, at the slowest hop's price (the ring
    advances in lock-step, so a hop that leaves the node sets every step's time)."""
    whole = _priced(topology.group(ring))
    hops = [_priced(topology.group([a, b])) for a, b in zip(ring, [*ring[1:], ring[0]], strict=True)]
    return lambda op, nbytes: max(hop(op, nbytes) for hop in hops) if op == "send_recv" else whole(op, nbytes)


def _pipeline(topology: ClusterTopology, firsts: Sequence[GPU]) -> Collective:
    """send_recv between neighbouring stages (first to second stage), all_reduce across all stages."""
    neighbours = _priced(topology.group(firsts[:2]))
    stages = _priced(topology.group(firsts))
    return lambda op, nbytes: neighbours(op, nbytes) if op == "send_recv" else stages(op, nbytes)




# ---------------------------------------------------------------------------------------------------- results


# TrainingTime and LayerTime are values, never changed once made, but not frozen: a frozen dataclass sets each field
# through object.__setattr__, which made building them (millions per async run) a sixth of a run's host time.
@dataclass(slots=True)
class TrainingTime:
    """Seconds one GPU spends on a piece of training work, by what it was doing. `total` is its wall time."""

    forward: float = 0.0
    backward: float = 0.0
    recompute: float = 0.0
    exposed_collective: float = 0.0
    pipeline_bubble: float = 0.0
    optimizer: float = 0.0
    barrier: float = 0.0  # waiting for other pipeline stages to finish their own update

    # Spelled out field by field: the trainer adds and totals these hundreds of thousands of times per run.
    @property
    def total(self) -> float:
        return (self.forward + self.backward + self.recompute + self.exposed_collective + self.pipeline_bubble
                + self.optimizer + self.barrier)

    def __add__(self, other: TrainingTime) -> TrainingTime:
        return TrainingTime(self.forward + other.forward, self.backward + other.backward,
                            self.recompute + other.recompute, self.exposed_collective + other.exposed_collective,
                            self.pipeline_bubble + other.pipeline_bubble, self.optimizer + other.optimizer,
                            self.barrier + other.barrier)

    @staticmethod
    def sum(times: Iterable[TrainingTime]) -> TrainingTime:
        """Σ times, added in order as `+` would, without making a TrainingTime per addition."""
        forward = backward = recompute = exposed = bubble = optimizer = barrier = 0.0
        for t in times:
            forward += t.forward
            backward += t.backward
            recompute += t.recompute
            exposed += t.exposed_collective
            bubble += t.pipeline_bubble
            optimizer += t.optimizer
            barrier += t.barrier
        return TrainingTime(forward, backward, recompute, exposed, bubble, optimizer, barrier)

    def labels(self, forward_label: str = "train_forward") -> dict[str, float]:
        """GPU-seconds by simulator label; recompute runs inside the backward pass. Log-prob passes use "logprob"."""
        return {
            forward_label: self.forward,
            "train_backward": self.backward + self.recompute,
            "optimizer": self.optimizer,
            "exposed_collective": self.exposed_collective,
            "pipeline_bubble": self.pipeline_bubble,
            "barrier": self.barrier,
        }


@dataclass(frozen=True)
class PipelineTime:
    """One data-parallel rank's work: what the GPUs of each pipeline stage did. Every stage's total is the wall time."""

    stages: tuple[TrainingTime, ...]

    @property
    def seconds(self) -> float:
        return max(stage.total for stage in self.stages)

    @property
    def bubble_fraction(self) -> float:
        """The first stage's pipeline bubble as a fraction of the wall time."""
        return self.stages[0].pipeline_bubble / self.seconds


@dataclass(slots=True)
class LayerTime:
    """One layer's (or the output head's) share of one pass over a micro-batch on one GPU."""

    gemm: float = 0.0
    attention: float = 0.0
    elementwise: float = 0.0
    collective: float = 0.0  # TP, CP and EP communication on the critical path

    @property
    def compute(self) -> float:
        return self.gemm + self.attention + self.elementwise

    def __add__(self, other: LayerTime) -> LayerTime:
        return LayerTime(self.gemm + other.gemm, self.attention + other.attention,
                         self.elementwise + other.elementwise, self.collective + other.collective)


@dataclass(frozen=True)
class _BackwardOverlap:
    """What a chunk's backward exposes around its layers' compute, by layout: the first gather (hidden behind the
    head), each layer's overlapping communication with that layer's kind (layers last to first), and what runs
    after the last layer (its reduce, the root unit's, the offloaded gradients' copy to host)."""

    first_gather: float
    comms: tuple[tuple[float, LayerKind], ...]
    after: float


def _causal_pairs(sequence_lengths: Sequence[int]) -> float:
    """(query, key) pairs of causal attention within each sequence, summed in order."""
    return sum(n * (n + 1) / 2 for n in sequence_lengths)


def _sum_by_kind(counts: dict[LayerKind, int], times: dict[LayerKind, LayerTime]) -> LayerTime:
    """Σ over layers of their times, as count × time per kind (the same result, without a sum per layer); `counts`
    in a fixed order, so the floating-point sum is the same in every process."""
    gemm = attention = elementwise = collective = 0.0
    for kind, count in counts.items():
        t = times[kind]
        gemm += t.gemm * count
        attention += t.attention * count
        elementwise += t.elementwise * count
        collective += t.collective * count
    return LayerTime(gemm, attention, elementwise, collective)


# Megatron-Core computes Q, K and V with one fused column-parallel GEMM (linear_qkv) and SwiGLU's gate and up with one
# (linear_fc1); Hugging Face models, which the FSDP backends train, keep them as separate nn.Linear modules.
_MEGATRON_FUSED = {"self_attn.q_proj": "linear_qkv", "self_attn.k_proj": "linear_qkv", "self_attn.v_proj": "linear_qkv",
                   "mlp.gate_proj": "linear_fc1", "mlp.up_proj": "linear_fc1"}


def _fuse_megatron(gemms: list[tuple[str, float, float, float]]) -> list[tuple[str, float, float, float]]:
    """Merge the GEMMs Megatron fuses: same input, output widths side by side, at the first member's place."""
    out: list[tuple[str, float, float, float]] = []
    where: dict[str, int] = {}
    for name, m, k, n in gemms:
        group = _MEGATRON_FUSED.get(name)
        if group is None:
            out.append((name, m, k, n))
        elif group in where:
            fused = out[where[group]]
            out[where[group]] = (group, fused[1], fused[2], fused[3] + n)
        else:
            where[group] = len(out)
            out.append((group, m, k, n))
    return out


# ---------------------------------------------------------------------------------------------------- FLOPs


def training_rates(gpu: GPUProfile, efficiency: float) -> GPURates:
    """What training kernels run at on `gpu` within a real step: its BF16 kernel rates × `efficiency`
    (`framework.kernel_efficiency(backend)`)."""
    return GPURates.from_profile(gpu, "bf16").sustained(efficiency)


def pipeline_pad_to(layout: TrainingPlacement, micro_batches: Sequence[Sequence[int]]) -> int:
    """Tokens every micro-batch of a rank's batch runs at: the longest of them when the pipeline pads packed
    micro-batches to one shape (`TrainingPlacement.pp_pads_micro_batches`, pp > 1), else 0 (each its own length)."""
    if layout.pp == 1 or not layout.pp_pads_micro_batches or not micro_batches:
        return 0
    return max(sum(mb) for mb in micro_batches)


def model_training_flops(spec: ModelSpec, sequence_lengths: Sequence[int]) -> float:
    """Model FLOPs of training on these sequences: 3 × the causal forward FLOPs (6·N·tokens + attention), no recompute."""
    return 3.0 * sum(spec.forward_flops(n) for n in sequence_lengths)


# ---------------------------------------------------------------------------------------------------- costs


@dataclass(frozen=True)
class TrainingCosts:
    """Training costs of `spec` on GPUs with `rates`, laid out as `layout`, communicating through `collectives`.

    `head` is "lm" for the policy and the reference model (log-probabilities over the vocabulary) and "value" for a
    critic (one scalar per token).
    """

    spec: ModelSpec
    rates: GPURates
    layout: TrainingPlacement
    collectives: GroupCollectives
    head: Literal["lm", "value"] = "lm"
    # (layer kind, tokens, backward) -> (GEMM, elementwise) seconds: micro-batches of equal token counts repeat across
    # DP ranks and passes, and neither depends on how the tokens split into sequences.
    _token_memo: dict[tuple[str, float, bool], tuple[float, float]] = field(default_factory=dict, init=False,
                                                                            repr=False, compare=False)

    def __post_init__(self) -> None:
        layout = self.layout
        if layout.dp is None:
            raise ValueError("the training layout's dp is not resolved; load scenarios with rlsim.config.load_scenario")
        c = self.collectives
        needed = {"tp": layout.tp > 1, "cp": layout.cp > 1, "ep": layout.ep > 1, "pp": layout.pp > 1,
                  "dp": layout.dp * layout.cp > 1,
                  "expert_dp": self.spec.routed_expert_params > 0 and self._expert_dp_degree > 1,
                  "host": layout.offload_params or layout.offload_optimizer}
        missing = [name for name, need in needed.items() if need and getattr(c, name) is None]
        if missing:
            raise ValueError(f"the layout needs collective costs for the {', '.join(missing)} group(s)")
        chunks = layout.pp * layout.virtual_pipeline_stages
        if self.spec.architecture.num_hidden_layers < chunks:
            raise ValueError(f"{self.spec.architecture.num_hidden_layers} layers cannot fill {chunks} pipeline chunks")

    # ---- shapes -------------------------------------------------------------------------------------------------

    @property
    def _implementation(self) -> str:
        return kernel_implementation(self.layout.backend)

    @property
    def _expert_dp_degree(self) -> int:
        layout = self.layout
        return max(1, layout.tp * layout.cp * (layout.dp or 1) // layout.ep)

    def _tokens(self, sequence_lengths: Sequence[int], pad_to: int = 0) -> float:
        """Tokens of the micro-batch on this GPU's TP group (CP splits every sequence), padded up to `pad_to`."""
        return max(sum(sequence_lengths), pad_to) / self.layout.cp

    def _attention_flops(self, sequence_lengths: Sequence[int]) -> float:
        """Forward attention FLOPs of one layer on this GPU: causal per sequence, heads split by TP, tokens by CP."""
        return self._attention_flops_per_pair * _causal_pairs(sequence_lengths) / (self.layout.tp * self.layout.cp)

    @cached_property
    def _attention_flops_per_pair(self) -> float:
        return self.spec.attention_flops_per_context_token / self.spec.architecture.num_hidden_layers

    def _widths(self) -> tuple[int, int, int, int]:
        """Query, key, value and attention-output widths of a layer (all heads)."""
        arch = self.spec.architecture
        if arch.mla is not None:
            qk = arch.num_attention_heads * (arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim)
            v = arch.num_attention_heads * arch.mla.v_head_dim
            return qk, qk, v, v
        q = arch.num_attention_heads * arch.attention_head_dim
        kv = arch.num_key_value_heads * arch.attention_head_dim
        return q, kv, kv, q

    # ---- one layer ----------------------------------------------------------------------------------------------

    def layer_forward(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int = 0) -> LayerTime:
        """Forward pass of one layer of `kind` over a micro-batch of packed sequences, padded up to `pad_to` tokens
        (the padding runs through everything but attention)."""
        return self._layer(kind, sequence_lengths, pad_to, backward=False)

    def layer_backward(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int = 0) -> LayerTime:
        """Backward pass of one layer (input and weight gradients), recompute excluded."""
        return self._layer(kind, sequence_lengths, pad_to, backward=True)

    def layer_recompute(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int = 0, *,
                        forward: LayerTime | None = None) -> LayerTime:
        """What activation recompute re-runs for one layer during the backward pass; `forward`: the layer's forward
        time over the same micro-batch, when already priced."""
        mode = self.layout.activation_recompute
        if mode == "full":
            return forward if forward is not None else self.layer_forward(kind, sequence_lengths, pad_to)
        if mode == "selective":
            return LayerTime(attention=self._attention_seconds(sequence_lengths, backward=False))
        return LayerTime()

    def _layer(self, kind: LayerKind, sequence_lengths: Sequence[int], pad_to: int, *, backward: bool) -> LayerTime:
        tokens = self._tokens(sequence_lengths, pad_to)
        key = (kind, tokens, backward)
        per_token = self._token_memo.get(key)
        if per_token is None:
            per_token = self._token_memo[key] = (self._price_gemms(kind, tokens, backward=backward),
                                                 self._elementwise_seconds(kind, tokens, backward=backward))
        gemm, elementwise = per_token
        attention = self._attention_seconds(sequence_lengths, backward=backward)
        collective = self._layer_collectives(kind, tokens, attention, backward=backward)
        return LayerTime(gemm, attention, elementwise, collective)

    def _price_gemms(self, kind: LayerKind, tokens: float, *, backward: bool) -> float:
        rates = self.rates
        experts, gemms = self._gemm_plan[kind]
        seconds = 0.0
        if experts:
            moe = self.spec.architecture.moe
            assert moe is not None
            # Sequence parallelism: the MoE block sees this GPU's share of the tokens.
            assignments = tokens / self.layout.tp * moe.num_experts_per_tok
            touched = moe.experts_touched(tokens / self.layout.tp) / self.layout.ep
            for k, n in experts:
                flops = 2.0 * assignments * k * n
                nbytes = ACTIVATION_BYTES * (assignments * k + touched * k * n + assignments * n)
                seconds += (2 if backward else 1) * rates.kernel_seconds(flops, nbytes)
        for rows_divisor, k, n in gemms:
            m = tokens / rows_divisor
            if backward:
                seconds += rates.gemm_seconds(m, k, n) + rates.gemm_seconds(k, n, m)
            else:
                seconds += rates.gemm_seconds(m, n, k)
        return seconds

    @cached_property
    def _gemm_plan(self) -> dict[LayerKind, tuple[tuple[tuple[float, float], ...], tuple[tuple[float, float, float], ...]]]:
        """Per layer kind, the GEMMs one GPU runs, split by this layout once: routed experts as (K, N), and every other
        GEMM as (divisor of the token count giving its rows M, K, N) after TP splitting and Megatron's fusion."""
        arch, tp = self.spec.architecture, self.layout.tp
        plan = {}
        for kind, shapes in self._gemm_shapes.items():
            experts: list[tuple[float, float]] = []
            local: list[tuple[str, float, float, float]] = []  # (name, rows divisor, K, N)
            for shape in shapes:
                k, n = shape.in_features, shape.out_features
                if shape.name.startswith("mlp.experts"):
                    experts.append((k, n))
                    continue
                rows_divisor = 1
                if shape.name == "mlp.gate":
                    rows_divisor = tp  # the router is replicated across TP and sees this GPU's share of the tokens
                elif shape.name.endswith(("o_proj", "down_proj")):
                    k /= tp  # row-parallel
                elif shape.name.endswith(("k_proj", "v_proj")):
                    n /= min(tp, arch.num_key_value_heads)  # KV heads replicate once TP exceeds them
                elif not shape.name.endswith(("q_a_proj", "kv_a_proj_with_mqa")):
                    n /= tp  # column-parallel; MLA's down-projections to the latents are replicated
                local.append((shape.name, rows_divisor, k, n))
            if self.layout.backend == "megatron":
                local = _fuse_megatron(local)
            plan[kind] = (tuple(experts), tuple((d, k, n) for _, d, k, n in local))
        return plan

    def _attention_seconds(self, sequence_lengths: Sequence[int], *, backward: bool) -> float:
        forward_eff, backward_eff = ATTENTION_EFFICIENCY["megatron" if self.layout.backend == "megatron" else "fsdp"]
        flops = self._attention_flops(sequence_lengths)
        if backward:
            return self.rates.compute_seconds(ATTENTION_BACKWARD_FLOPS * flops / backward_eff)
        return self.rates.compute_seconds(flops / forward_eff)

    def _elementwise_bytes(self, kind: LayerKind) -> dict[str, float]:
        """Forward bytes per token of each memory-bound op of one layer, before the TP split (worked out once per kind:
        every layer of every micro-batch asks)."""
        cache = self.__dict__.setdefault("_elementwise_bytes_cache", {})
        if kind not in cache:
            cache[kind] = self._elementwise_bytes_of(kind)
        return cache[kind]

    def _elementwise_bytes_of(self, kind: LayerKind) -> dict[str, float]:
        arch = self.spec.architecture
        per = ELEMENTWISE_BYTES[self._implementation]
        h = arch.hidden_size
        q, k, _, _ = self._widths()
        if arch.mla is not None:
            rope = (arch.num_attention_heads + 1) * arch.mla.qk_rope_head_dim  # RoPE touches only the rope dims
        else:
            rope = q + k
        out = {"rmsnorm": per["rmsnorm"] * (2 * h + (q + k if arch.qk_norm else 0)),
               "rope": per["rope"] * rope,
               "residual": per["residual"] * 2 * h}
        if kind == "moe" and arch.moe is not None:
            moe = arch.moe
            width = (moe.num_experts_per_tok + moe.n_shared_experts) * moe.moe_intermediate_size
            out["moe_permute"] = MOE_PERMUTE_BYTES * moe.num_experts_per_tok * h
        else:
            width = arch.intermediate_size
        out["swiglu"] = per["swiglu"] * width
        return out

    def _elementwise_seconds(self, kind: LayerKind, tokens: float, *, backward: bool) -> float:
        scale = (ELEMENTWISE_BACKWARD_TRAFFIC if backward else 1.0) * tokens / self.layout.tp
        return sum(self.rates.memory_seconds(scale * b) for b in self._elementwise_bytes(kind).values())

    def _layer_collectives(self, kind: LayerKind, tokens: float, attention_seconds: float, *, backward: bool) -> float:
        """Exposed TP, CP and EP communication of one layer's pass over `tokens` tokens on this GPU (the backward pass
        mirrors the forward's collectives)."""
        layout, arch, c = self.layout, self.spec.architecture, self.collectives
        h = arch.hidden_size
        seconds = 0.0
        moe = kind == "moe" and arch.moe is not None
        if layout.tp > 1:
            assert c.tp is not None
            activation = ACTIVATION_BYTES * tokens * h
            # Sequence parallelism: all-gather before and reduce-scatter after the attention block and the MLP. With
            # expert parallelism the MoE block dispatches the sequence-parallel shards directly (MoE parallel folding).
            pairs = 1 if moe and layout.ep > 1 else 2
            seconds += pairs * (c.tp("all_gather", activation) + c.tp("reduce_scatter", activation))
        if moe and layout.ep > 1:
            assert c.ep is not None and arch.moe is not None
            routed = ACTIVATION_BYTES * tokens / layout.tp * arch.moe.num_experts_per_tok * h
            seconds += 2 * c.ep("all_to_all", routed)
        if layout.cp > 1:
            assert c.cp is not None
            q, k, v, out = self._widths()
            if layout.backend == "megatron":
                # Ring attention: cp−1 exchanges of a K/V block (backward: K/V and their gradients), each hidden behind
                # the attention of one block.
                block_bytes = ACTIVATION_BYTES * tokens * (k + v) / layout.tp * (2 if backward else 1)
                block = c.cp("send_recv", block_bytes)
                seconds += (layout.cp - 1) * max(0.0, block - attention_seconds / layout.cp)
            else:
                # Ulysses: all-to-all Q/K/V from sequence-split to head-split, and the output back.
                seconds += c.cp("all_to_all", ACTIVATION_BYTES * tokens * (q + k + v) / layout.tp)
                seconds += c.cp("all_to_all", ACTIVATION_BYTES * tokens * out / layout.tp)
        return seconds

    # ---- output head --------------------------------------------------------------------------------------------

    def head_time(self, sequence_lengths: Sequence[int], *, backward: bool, pad_to: int = 0) -> LayerTime:
        """Final norm, output head and (for "lm") log-softmax over the vocabulary, on the last pipeline stage."""
        arch, tp, rates = self.spec.architecture, self.layout.tp, self.rates
        tokens = self._tokens(sequence_lengths, pad_to)
        width = arch.vocab_size / tp if self.head == "lm" else 1  # vocabulary-parallel head
        h = arch.hidden_size
        if backward:
            gemm = rates.gemm_seconds(tokens, h, width) + rates.gemm_seconds(h, width, tokens)
        else:
            gemm = rates.gemm_seconds(tokens, width, h)
        traffic = ELEMENTWISE_BACKWARD_TRAFFIC if backward else 1.0
        norm = ELEMENTWISE_BYTES[self._implementation]["rmsnorm"] * h * tokens / tp * traffic
        elementwise = rates.memory_seconds(norm)
        if self.head == "lm":
            per_logit = LOGPROB_BYTES[self.layout.logprob_kernel][1 if backward else 0]
            elementwise += rates.memory_seconds(per_logit * tokens * width)
        collective = 0.0
        if tp > 1:
            assert self.collectives.tp is not None
            collective = self.collectives.tp("reduce_scatter" if backward else "all_gather",
                                             ACTIVATION_BYTES * tokens * h)
        return LayerTime(gemm=gemm, elementwise=elementwise, collective=collective)

    # ---- pipeline chunks ----------------------------------------------------------------------------------------

    @property
    def _chunks(self) -> int:
        return self.layout.pp * self.layout.virtual_pipeline_stages

    def _adjacent_kinds(self, chunk: int) -> dict[tuple[LayerKind, LayerKind], int]:
        """How often each (layer kind, next layer kind) pair occurs in a chunk."""
        cache = self.__dict__.setdefault("_adjacent_cache", {})
        if chunk not in cache:
            kinds = self.chunk_layers(chunk)
            counts: dict[tuple[LayerKind, LayerKind], int] = {}
            for pair in zip(kinds[:-1], kinds[1:], strict=True):
                counts[pair] = counts.get(pair, 0) + 1
            cache[chunk] = counts
        return cache[chunk]

    def _kind_counts(self, chunk: int) -> dict[LayerKind, int]:
        """Layers of each kind in a chunk, kinds in order of first appearance."""
        cache = self.__dict__.setdefault("_kind_counts_cache", {})
        if chunk not in cache:
            counts: dict[LayerKind, int] = {}
            for kind in self.chunk_layers(chunk):
                counts[kind] = counts.get(kind, 0) + 1
            cache[chunk] = counts
        return cache[chunk]

    def chunk_layers(self, chunk: int) -> tuple[LayerKind, ...]:
        """Layer kinds of model chunk `chunk` (stage chunk % pp); layers split as evenly as possible, earlier chunks larger."""
        cache = self.__dict__.setdefault("_chunk_layers_cache", {})
        if chunk not in cache:
            kinds = self.spec.layer_kinds
            base, extra = divmod(len(kinds), self._chunks)
            start = chunk * base + min(chunk, extra)
            cache[chunk] = kinds[start:start + base + (1 if chunk < extra else 0)]
        return cache[chunk]

    def _unit_params(self, kind: LayerKind) -> tuple[float, float]:
        """(dense, routed-expert) parameters of one layer on this GPU before ZeRO sharding."""
        return self._unit_param_table[kind]

    @cached_property
    def _unit_param_table(self) -> dict[LayerKind, tuple[float, float]]:
        # Counted once per cost model: the hot path asks for every layer of every micro-batch.
        table = {}
        for kind in ("dense", "moe"):
            if not self.spec.layer_count(kind):
                continue
            params = self.spec.layer_params(kind)
            routed = sum(v for name, v in params.items() if name.startswith("mlp.experts"))
            table[kind] = ((sum(params.values()) - routed) / self.layout.tp, routed / self.layout.ep)
        return table

    @cached_property
    def _gemm_shapes(self) -> dict[LayerKind, tuple]:
        return {kind: self.spec.layer_gemm_shapes(kind) for kind in ("dense", "moe") if self.spec.layer_count(kind)}

    def _root_params(self, chunk: int) -> float:
        """Embedding (first chunk) and final norm + output head (last chunk) parameters on this GPU."""
        arch = self.spec.architecture
        params = 0.0
        if chunk == 0:
            params += self.spec.vocab_matrix_params
        if chunk == self._chunks - 1:
            tied = arch.tie_word_embeddings and self._chunks == 1
            head = 0 if tied else (self.spec.vocab_matrix_params if self.head == "lm" else arch.hidden_size)
            params += head + arch.hidden_size
        return params / self.layout.tp

    def _gather(self, dense: float, expert: float) -> float:
        """All-gather of a unit's bf16 weights across the ranks sharding them (plus its host copy when offloaded)."""
        c, seconds = self.collectives, 0.0
        if dense and c.dp is not None:
            seconds += c.dp("all_gather", PARAM_GATHER_BYTES * dense)
        if expert and c.expert_dp is not None:
            seconds += c.expert_dp("all_gather", PARAM_GATHER_BYTES * expert)
        if self.layout.offload_params:
            assert c.host is not None
            seconds += c.host(PARAM_GATHER_BYTES * (dense / self._dense_shards + expert / self._expert_dp_degree))
        return seconds

    def _reduce(self, dense: float, expert: float) -> float:
        """Gradient reduction of a unit: reduce-scatter under ZeRO ≥ 1, all-reduce without ZeRO."""
        c, seconds = self.collectives, 0.0
        op = "reduce_scatter" if self.layout.zero_stage >= 1 else "all_reduce"
        if dense and c.dp is not None:
            seconds += c.dp(op, GRAD_REDUCE_BYTES * dense)
        if expert and c.expert_dp is not None:
            seconds += c.expert_dp(op, GRAD_REDUCE_BYTES * expert)
        return seconds

    @property
    def _dense_shards(self) -> int:
        return (self.layout.dp or 1) * self.layout.cp

    def _chunk_forward(self, chunk: int, sequence_lengths: Sequence[int], layers: dict[LayerKind, LayerTime],
                       pad_to: int = 0) -> TrainingTime:
        """One forward op of a pipeline chunk: its layers, the head on the last chunk, FSDP gathers, the send onward."""
        kinds = self.chunk_layers(chunk)
        total = _sum_by_kind(self._kind_counts(chunk), layers)
        last = chunk == self._chunks - 1
        if last:
            total = total + self.head_time(sequence_lengths, backward=False, pad_to=pad_to)
        exposed = total.collective
        if self.layout.zero_stage >= 3:
            # Root unit and first layer gathered up front; each later gather hides behind the previous layer.
            gather_of = {kind: self._gather(*self._unit_params(kind)) for kind in self._kind_counts(chunk)}
            root = self._root_params(chunk)
            exposed += (self._gather(root, 0.0) if root else 0.0) + gather_of[kinds[0]]
            # Each gather hides behind the previous layer's compute; pairs of layer kinds repeat, so count them.
            compute = {kind: layers[kind].compute for kind in gather_of}
            exposed += sum(count * max(0.0, gather_of[later] - compute[earlier])
                           for (earlier, later), count in self._adjacent_kinds(chunk).items())
        if not last:
            exposed += self._send(sequence_lengths, pad_to)
        return TrainingTime(forward=total.compute, exposed_collective=exposed)

    def _chunk_backward(self, chunk: int, sequence_lengths: Sequence[int], layers: dict[LayerKind, LayerTime],
                        recomputed: dict[LayerKind, LayerTime], *, reduce_gradients: bool,
                        pad_to: int = 0) -> TrainingTime:
        """One backward op of a pipeline chunk: recompute, gradients, FSDP gathers and gradient reduction, send back."""
        counts = self._kind_counts(chunk)
        last = chunk == self._chunks - 1
        head = self.head_time(sequence_lengths, backward=True, pad_to=pad_to) if last else LayerTime()
        backward = _sum_by_kind(counts, layers) + head
        recompute = _sum_by_kind(counts, recomputed)
        exposed = backward.collective + recompute.collective
        plan = self._backward_overlap(chunk, reduce_gradients)
        # Layers run last to first. The first gather hides behind the head's backward (if this chunk has it); while
        # layer i computes, the next layer's gather and the previous layer's reduce-scatter run.
        exposed += max(0.0, plan.first_gather - head.compute)
        window = {kind: layers[kind].compute + recomputed[kind].compute for kind in counts}
        for comm, kind in plan.comms:
            exposed += max(0.0, comm - window[kind])
        exposed += plan.after
        if chunk > 0:
            exposed += self._send(sequence_lengths, pad_to)
        return TrainingTime(backward=backward.compute, recompute=recompute.compute, exposed_collective=exposed)

    def _backward_overlap(self, chunk: int, reduce_gradients: bool) -> _BackwardOverlap:
        """The communication a chunk's backward overlaps with its layers: a function of the layout alone, so it is
        worked out once per chunk (the trainer prices tens of thousands of micro-batches)."""
        cache = self.__dict__.setdefault("_backward_overlap_cache", {})
        key = (chunk, reduce_gradients)
        if key in cache:
            return cache[key]
        order = tuple(reversed(self.chunk_layers(chunk)))
        # One gather and one reduce per layer kind: every layer of a kind moves the same bytes.
        gather_of = {kind: self._gather(*self._unit_params(kind)) if self.layout.zero_stage >= 3 else 0.0
                     for kind in self._kind_counts(chunk)}
        reduce_of = {kind: self._reduce(*self._unit_params(kind)) if reduce_gradients else 0.0
                     for kind in self._kind_counts(chunk)}
        gathers = [gather_of[kind] for kind in order]
        reduces = [reduce_of[kind] for kind in order]
        root_reduce = self._reduce(self._root_params(chunk), 0.0) if reduce_gradients else 0.0
        # While layer i computes, the next layer's gather and the previous layer's reduce-scatter run.
        comms = tuple(((gathers[i + 1] if i + 1 < len(order) else 0.0) + (reduces[i - 1] if i > 0 else 0.0), kind)
                      for i, kind in enumerate(order))
        after = reduces[-1] + root_reduce
        if self.layout.offload_params and reduce_gradients:
            # The gradient shards go to host memory, where the offloaded weights live.
            assert self.collectives.host is not None
            dense, expert = self._params_of([chunk])
            after += self.collectives.host(GRAD_REDUCE_BYTES * (dense / self._dense_shards
                                                                + expert / self._expert_dp_degree))
        cache[key] = _BackwardOverlap(gathers[0], comms, after)
        return cache[key]

    def _send(self, sequence_lengths: Sequence[int], pad_to: int = 0) -> float:
        """Point-to-point transfer of a micro-batch's activations (or their gradients) to the neighbouring stage."""
        if self.layout.pp == 1:
            return 0.0
        assert self.collectives.pp is not None
        nbytes = (ACTIVATION_BYTES * self._tokens(sequence_lengths, pad_to) * self.spec.architecture.hidden_size
                  / self.layout.tp)
        return self.collectives.pp("send_recv", nbytes)

    def _params_of(self, chunks: Sequence[int]) -> tuple[float, float]:
        """(dense, routed-expert) parameters of model chunks on one GPU, before ZeRO sharding."""
        dense = expert = 0.0
        for chunk in chunks:
            dense += self._root_params(chunk)
            for kind in self.chunk_layers(chunk):
                d, e = self._unit_params(kind)
                dense += d
                expert += e
        return dense, expert

    # ---- whole passes -------------------------------------------------------------------------------------------

    def update(self, micro_batches: Sequence[Sequence[int]], pad_to: int = 0) -> PipelineTime:
        """One optimizer step on one data-parallel rank: forward and backward of every micro-batch, then the step.

        `micro_batches` are this rank's micro-batches, each a list of packed sequence lengths (whole sequences, before
        the CP split); each runs padded up to `pad_to` tokens (`TrainingPlacement.pp_pads_micro_batches`).
        """
        if not micro_batches:
            raise ValueError("an update needs at least one micro-batch")
        zero = self.layout.zero_stage
        forward, backward = [], []
        for index, lengths in enumerate(micro_batches):
            # ZeRO-2/3 reduce gradients on every micro-batch; ZeRO-0/1 once, under the last micro-batch's backward.
            reduce_now = zero >= 2 or index == len(micro_batches) - 1
            f_ops, b_ops = self._micro_batch_ops(lengths, pad_to, reduce_now)
            forward.append(f_ops)
            backward.append(b_ops)
        stages = self._run_pipeline(forward, backward)
        steps = [self.optimizer_step(stage) for stage in range(self.layout.pp)]
        return _finish(stages, steps)

    def micro_step(self, lengths: Sequence[int]) -> TrainingTime:
        """Forward and backward of one micro-batch on a single-stage rank, its gradients reduced as ZeRO-2/3 do after
        every micro-batch: the unit FSDP's ranks run in lock step (`rlsim.sim.trainer`), with no optimizer step."""
        if self._chunks != 1:
            raise ValueError(f"a lock-step micro-batch runs on one pipeline stage, not {self._chunks} model chunks")
        forward, backward = self._micro_batch_ops(lengths, 0, True)
        return TrainingTime.sum((*forward, *backward))

    def forward_pass(self, micro_batches: Sequence[Sequence[int]], pad_to: int = 0) -> PipelineTime:
        """A forward-only pass over micro-batches (each padded up to `pad_to` tokens): old-policy or reference
        log-probs ("lm" head), critic values ("value" head). No recompute, no backward, no optimizer; FSDP still
        gathers weights layer by layer."""
        if not micro_batches:
            raise ValueError("a forward pass needs at least one micro-batch")
        forward = [self._micro_batch_ops(lengths, pad_to, None)[0] for lengths in micro_batches]
        stages = self._run_pipeline(forward, None)
        return _finish(stages, [TrainingTime()] * self.layout.pp)

    def _micro_batch_ops(self, lengths: Sequence[int], pad_to: int, reduce_gradients: bool | None) -> tuple[
            tuple[TrainingTime, ...], tuple[TrainingTime, ...]]:
        """Each chunk's forward op over a micro-batch and, unless `reduce_gradients` is None (a forward-only pass), its
        backward op. A micro-batch enters them only through its tokens and its attention's causal pairs, so equal
        ones are priced once (an async run prices tens of thousands of micro-batches, many alike)."""
        memo = self.__dict__.setdefault("_micro_batch_memo", {})
        key = (sum(lengths), pad_to, _causal_pairs(lengths), reduce_gradients)
        ops = memo.get(key)
        if ops is None:
            f_layers, b_layers, r_layers = self._layer_times(lengths, pad_to, forward_only=reduce_gradients is None)
            forward = tuple(self._chunk_forward(g, lengths, f_layers, pad_to) for g in range(self._chunks))
            backward = () if reduce_gradients is None else tuple(
                self._chunk_backward(g, lengths, b_layers, r_layers, reduce_gradients=reduce_gradients, pad_to=pad_to)
                for g in range(self._chunks))
            ops = memo[key] = (forward, backward)
        return ops

    def _layer_times(self, lengths: Sequence[int], pad_to: int = 0, *, forward_only: bool = False) -> tuple[
            dict[LayerKind, LayerTime], dict[LayerKind, LayerTime], dict[LayerKind, LayerTime]]:
        kinds = [kind for kind in ("dense", "moe") if self.spec.layer_count(kind)]
        f_layers = {kind: self.layer_forward(kind, lengths, pad_to) for kind in kinds}
        if forward_only:
            return f_layers, {}, {}
        b_layers = {kind: self.layer_backward(kind, lengths, pad_to) for kind in kinds}
        r_layers = {kind: self.layer_recompute(kind, lengths, pad_to, forward=f_layers[kind]) for kind in kinds}
        return f_layers, b_layers, r_layers

    def _run_pipeline(self, forward: list[list[TrainingTime]],
                      backward: list[list[TrainingTime]] | None) -> list[TrainingTime]:
        """Play the (interleaved) 1F1B schedule; each stage's busy time by kind plus its bubble up to the makespan."""
        p = self.layout.pp
        f_seconds = [[op.total for op in ops] for ops in zip(*forward, strict=True)]  # [chunk][micro-batch]
        b_seconds = None if backward is None else [[op.total for op in ops] for ops in zip(*backward, strict=True)]
        makespan = pipeline_makespan(f_seconds, b_seconds, p)
        stages = []
        for stage in range(p):
            busy = TrainingTime.sum(op for per_batch in (forward, backward or []) for chunk_ops in per_batch
                                    for op in chunk_ops[stage::p])
            stages.append(busy + TrainingTime(pipeline_bubble=max(0.0, makespan - busy.total)))
        return stages

    # ---- optimizer ----------------------------------------------------------------------------------------------

    def optimizer_step(self, stage: int = 0) -> TrainingTime:
        """Gradient clipping and Adam over the parameters this GPU updates, then ZeRO-1/2's weight all-gather."""
        # A function of the layout alone, asked for every update priced (FSDP's lock-step path prices each micro-batch
        # as an update of its own).
        cache = self.__dict__.setdefault("_optimizer_step_cache", {})
        if stage not in cache:
            cache[stage] = self._price_optimizer_step(stage)
        return cache[stage]

    def _price_optimizer_step(self, stage: int) -> TrainingTime:
        layout, c = self.layout, self.collectives
        dense, expert = self._params_of(range(stage, self._chunks, layout.pp))
        if layout.zero_stage >= 1:
            local = dense / self._dense_shards + expert / self._expert_dp_degree
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
            exposed += self._gather(dense, expert)
        return TrainingTime(optimizer=seconds, exposed_collective=exposed)


def _finish(stages: list[TrainingTime], steps: list[TrainingTime]) -> PipelineTime:
    """Add each stage's optimizer step, then the wait for the slowest stage (the gradient-norm all-reduce joins them)."""
    done = [stage + step for stage, step in zip(stages, steps, strict=True)]
    end = max(stage.total for stage in done)
    return PipelineTime(tuple(stage + TrainingTime(barrier=end - stage.total) for stage in done))


# ---------------------------------------------------------------------------------------------------- schedule


def pipeline_makespan(forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]] | None,
                      stages: int) -> float:
    """Wall time of a 1F1B pipeline schedule, played op by op.

    `forward[g][i]` is the time of model chunk g's forward pass on micro-batch i (chunk g runs on stage g % stages;
    more chunks than stages is Megatron's interleaved schedule); `backward` likewise, or None for a forward-only pass.
    Stage s runs min(warm-up, all) forwards, then alternates one forward and one backward, then drains its backwards;
    warm-up is p−s−1 forwards, or (p−s−1)·2 + (v−1)·p chunk-forwards when interleaved (Megatron-LM's schedules.py).
    A forward waits for the previous chunk's forward of the same micro-batch; a backward for the next chunk's backward
    (the last chunk's for its own forward).
    """
    p, chunks = stages, len(forward)
    if chunks % p:
        raise ValueError(f"{chunks} model chunks do not divide over {p} pipeline stages")
    v, m = chunks // p, len(forward[0])
    if v > 1 and m % p:
        raise ValueError(f"the interleaved schedule needs micro-batches ({m}) in multiples of the pipeline stages ({p})")
    total = m * v

    def chunk_of(k: int, stage: int, reverse: bool) -> tuple[int, int]:
        group = (k // p) % v
        virtual = v - 1 - group if reverse else group
        return virtual * p + stage, (k // (p * v)) * p + k % p

    orders = []
    for s in range(p):
        fwd = [("F", *chunk_of(k, s, False)) for k in range(total)]
        if backward is None:
            orders.append(fwd)
            continue
        bwd = [("B", *chunk_of(k, s, True)) for k in range(total)]
        warmup = min(total, (p - s - 1) * 2 + (v - 1) * p if v > 1 else p - s - 1)
        order = fwd[:warmup]
        for j in range(total - warmup):
            order += [fwd[warmup + j], bwd[j]]
        orders.append(order + bwd[total - warmup:])

    done: dict[tuple[str, int, int], float] = {}
    clock = [0.0] * p
    position = [0] * p
    remaining = sum(len(order) for order in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while position[s] < len(orders[s]):
                op = orders[s][position[s]]
                kind, g, i = op
                if kind == "F":
                    dependency = ("F", g - 1, i) if g > 0 else None
                    duration = forward[g][i]
                else:
                    dependency = ("B", g + 1, i) if g < chunks - 1 else ("F", g, i)
                    assert backward is not None
                    duration = backward[g][i]
                if dependency is not None and dependency not in done:
                    break
                start = max(clock[s], done[dependency] if dependency is not None else 0.0)
                clock[s] = done[op] = start + duration
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")  # an ordering bug, never an input error
    return max(clock)
