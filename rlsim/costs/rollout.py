"""Cost of one rollout engine: a vLLM/SGLang instance over `tp` GPUs (expert parallelism `ep` inside it).

An engine iteration runs every layer once for the tokens scheduled in it: new prompt tokens (prefill, possibly a chunk of
a longer prompt) and one token per decoding sequence. Each kernel of that forward pass takes the roofline time of
`GPURates` (the longer of its compute and its HBM traffic, with a fixed fill cost; the weight GEMMs by their shape,
with tile and wave quantization), on one GPU of the engine, with the weights, heads and experts split the way vLLM and
SGLang split them:

* attention heads and FFN columns over `tp` (Megatron column/row parallelism), KV heads too until each GPU holds one,
  the MLA latent cache replicated on every GPU; two all-reduces of the hidden states per layer;
* routed experts over `ep` groups, each expert's matrices over the remaining tp/ep GPUs; a layer with `ep > 1`
  dispatches and combines its tokens with two all-to-alls instead of its second all-reduce;
* an iteration reads each weight matrix once whatever the batch (an MoE layer only the experts its tokens touch:
  `MoE.experts_touched`, E·(1 − (1 − top_k/E)^tokens) under even routing), and the KV cache of every sequence once;
* the output head runs only for rows whose logits are needed: every decoding sequence, and a prefill chunk only when
  it ends its prompt; the sampler then passes over those logits.

On top of the GPU time come the engine's CPU costs (`EngineOverheads`): per-iteration scheduling and bookkeeping,
hidden behind the GPU when the engine overlaps them (SGLang's overlap scheduler, vLLM's async scheduling), and kernel
launches, which CUDA graphs replace with a short gap per graph node. vLLM without CUDA graphs runs uncompiled, each
PyTorch-native op its own kernel: the ops beyond the priced kernels, counted from its source (`VLLM_EAGER_KERNELS`),
add a launch and a small kernel each.

Fast advance. For a fixed decode batch, every kernel's time is a maximum of affine functions of the batch's total
context, so the iteration time is a continuous, nondecreasing, convex piecewise-linear function of it (`DecodeProfile`).
Context grows by `batch` tokens per iteration, so the time of k iterations is a sum of arithmetic series, one per
linear piece, and its inverse is a binary search over that closed form: no loop over iterations anywhere.

Left out: CUDA-graph padding of the batch to a captured size, the gather of vocabulary-split logits, the embedding
all-reduce, and expert load imbalance (tokens are assumed spread evenly over the EP groups). Preemption, prefix
sharing and chunking decisions belong to the simulated engine, which calls these functions.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, NamedTuple

from rlsim.config.framework import (
    CUDA_GRAPH_MAX_TOKENS,
    ENGINE_STEP_CPU_PER_SEQUENCE_S,
    ENGINE_STEP_CPU_S,
    KERNEL_GAP_S,
    KERNEL_LAUNCH_S,
    Framework,
)
from rlsim.config.schema import RolloutPlacement
from rlsim.costs.compute import GEMM_FILL_S, GPURates
from rlsim.costs.memory import kv_bytes_per_token_per_gpu, rollout_workspace_bytes
from rlsim.models import ModelSpec

CollectiveSeconds = Callable[[float], float]
"""Time of one collective over the engine's GPUs, given its size in bytes: for an all-reduce the tensor every GPU
holds and reduces, for an all-to-all the bytes each GPU sends to the group (its own share included)."""

# ---- precisions of what is not a weight -----------------------------------------------------------------------

ACTIVATION_BYTES = 2  # bf16 hidden states and intermediate activations
LOGIT_BYTES = 4  # the sampler works on fp32 logits
# The sampler's passes over the logits of each row after the output head wrote them: softmax reads them and writes the
# probabilities, sampling reads the probabilities.
SAMPLER_LOGIT_PASSES = 3


@dataclass(frozen=True)
class EngineOverheads:
    """CPU-side costs of an engine, the same for every GPU and model (defaults and their sources: rlsim.config.framework)."""

    step_cpu_seconds: float = ENGINE_STEP_CPU_S
    step_cpu_per_sequence_seconds: float = ENGINE_STEP_CPU_PER_SEQUENCE_S
    overlap_scheduling: bool = True  # CPU work of step n+1 runs while the GPU computes step n
    kernel_launch_seconds: float = KERNEL_LAUNCH_S
    kernel_gap_seconds: float = KERNEL_GAP_S
    cuda_graphs: bool = True
    cuda_graph_max_tokens: int = CUDA_GRAPH_MAX_TOKENS
    # Without CUDA graphs vLLM also runs without torch.compile (enforce_eager), so its PyTorch-native ops launch one
    # kernel each (`VLLM_EAGER_KERNELS`); counted for vLLM only.
    engine: Literal["vllm", "sglang"] = "vllm"

    @classmethod
    def for_placement(cls, placement: RolloutPlacement, framework: Framework | None = None) -> EngineOverheads:
        """The overheads of an engine configured as in the scenario (vLLM and SGLang alike, but for whether they overlap
        their CPU work and vLLM's eager kernels)."""
        framework = framework or Framework()
        return cls(
            step_cpu_seconds=framework.engine_step_cpu_s,
            step_cpu_per_sequence_seconds=framework.engine_step_cpu_per_sequence_s,
            overlap_scheduling=framework.overlaps(placement.engine),
            kernel_launch_seconds=framework.kernel_launch_s,
            kernel_gap_seconds=framework.kernel_gap_s,
            cuda_graphs=placement.cuda_graphs,
            cuda_graph_max_tokens=framework.cuda_graph_max_tokens,
            engine=placement.engine,
        )

    @property
    def launches_op_by_op(self) -> bool:
        """Whether every PyTorch-native op of a layer is its own kernel: vLLM in eager mode."""
        return self.engine == "vllm" and not self.cuda_graphs

    def replays_graph(self, tokens: float) -> bool:
        """Whether an iteration of `tokens` tokens replays a captured CUDA graph instead of launching kernels."""
        return self.cuda_graphs and tokens <= self.cuda_graph_max_tokens


@dataclass(frozen=True)
class PrefillChunk:
    """New prompt tokens of one sequence in an iteration, after `cached_tokens` of it already in the KV cache.

    `logits`: the chunk ends the prompt, so its last token goes through the output head and is sampled (the first
    generated token); an earlier chunk of a chunked prefill produces no logits.
    """

    tokens: int
    cached_tokens: int = 0
    logits: bool = True


class _Kernel(NamedTuple):
    """One kernel launched `count` times per iteration, its work affine in the decode batch's total context c.

    kind: "gemm" runs at the GEMM rate, "attention" at the fused-attention rate, "memory" is bound by HBM alone.
    shape: (m, n, k) of a GEMM, timed by `GPURates.gemm_seconds` (tile and wave quantization); its work does not
    depend on the context.
    """

    name: str
    count: int
    kind: Literal["gemm", "attention", "memory"]
    flops: float = 0.0
    flops_per_context: float = 0.0
    nbytes: float = 0.0
    bytes_per_context: float = 0.0
    shape: tuple[float, float, float] | None = None


class _Collective(NamedTuple):
    name: str
    count: int
    seconds: float


class _Work(NamedTuple):
    """What one iteration computes: decode rows plus prefill chunks, summed."""

    decode: int  # decoding sequences, one new token each
    prefill: int  # new prompt tokens
    prefill_cached: int  # tokens of those prompts already cached, re-read by their attention
    prefill_pairs: float  # (query, key) pairs of the prefill attention, causal within each chunk
    prefill_logits: int  # chunks that end their prompt
    prefill_sequences: int  # sequences with a prefill chunk in the iteration

    @property
    def tokens(self) -> int:
        return self.decode + self.prefill

    @property
    def logit_rows(self) -> int:
        return self.decode + self.prefill_logits


# How each weight matrix of a layer is split over the engine's GPUs, and which ones one fused kernel computes
# together (vLLM's QKVParallelLinear, MergedColumnParallelLinear, fused MoE and MLA's fused down-projections).
_SPLIT: dict[str, Literal["column", "row", "replicated", "experts"]] = {
    "self_attn.q_proj": "column",
    "self_attn.k_proj": "column",
    "self_attn.v_proj": "column",
    "self_attn.o_proj": "row",
    "self_attn.q_a_proj": "replicated",
    "self_attn.q_b_proj": "column",
    "self_attn.kv_a_proj_with_mqa": "replicated",
    "self_attn.kv_b_proj": "column",
    "mlp.gate_proj": "column",
    "mlp.up_proj": "column",
    "mlp.down_proj": "row",
    "mlp.gate": "replicated",
    "mlp.experts.gate_proj": "experts",
    "mlp.experts.up_proj": "experts",
    "mlp.experts.down_proj": "experts",
    "mlp.shared_experts.gate_proj": "column",
    "mlp.shared_experts.up_proj": "column",
    "mlp.shared_experts.down_proj": "row",
}
_ROUTED_EXPERTS = "mlp.experts."
_FUSED = {
    "self_attn.q_proj": "qkv_proj",
    "self_attn.k_proj": "qkv_proj",
    "self_attn.v_proj": "qkv_proj",
    "self_attn.q_a_proj": "qkv_a_proj",
    "self_attn.kv_a_proj_with_mqa": "qkv_a_proj",
    "mlp.gate_proj": "mlp.gate_up_proj",
    "mlp.up_proj": "mlp.gate_up_proj",
    "mlp.experts.gate_proj": "mlp.experts.gate_up_proj",
    "mlp.experts.up_proj": "mlp.experts.gate_up_proj",
    "mlp.shared_experts.gate_proj": "mlp.shared_experts.gate_up_proj",
    "mlp.shared_experts.up_proj": "mlp.shared_experts.gate_up_proj",
}


# Kernels vLLM launches per decoder layer in a decode step when it runs eagerly (enforce_eager: no CUDA graphs and no
# torch.compile, so each PyTorch-native op is a kernel), by half of the layer, counted op by op from vLLM 0.8.5.post1's
# source (V1 engine, BF16, FlashAttention 3 / FlashMLA on Hopper; the version verl's DeepSeek-V3 recipe installs). The
# NCCL all-reduces are not in these counts (`_layer_collectives`). Attention halves, each with the input RMSNorm:
# * gqa 7: norm, qkv GEMM, rotary_embedding, reshape_and_cache_flash, FA3 forward and its combine (or semaphore reset),
#   o_proj (model_executor/models/llama.py:203-207; v1/attention/backends/flash_attn.py:561-626); Qwen2.5's qkv bias is
#   fused into the GEMM (cuBLASLt epilogue);
# * gqa_qk_norm 23: Qwen3 calls q_norm and k_norm through RMSNorm.forward_native, 8 kernels each (to(fp32), pow, mean,
#   +eps, rsqrt, mul, to(bf16), ·weight: models/qwen3.py:134-141, layers/layernorm.py:111-147);
# * mla 32: DeepSeek-V3's MLA decode: 4 projections, 2 latent norms, 3 copies, the absorbed W_UK and W_UV bmm's, 13
#   kernels of DeepseekScalingRotaryEmbedding in plain PyTorch, concat_and_cache_mla, the cat of query parts, FlashMLA's
#   two kernels, 2 write-backs (models/deepseek_v2.py:471-477, v1/attention/backends/mla/common.py:690-971,
#   layers/rotary_embedding.py:779-817).
# MLP halves, each with the post-attention RMSNorm:
# * dense 4: norm, gate_up GEMM, silu_and_mul, down GEMM;
# * moe 13 (Qwen3-MoE: softmax top-k, no shared experts): router GEMM, fp32 cast, topk_softmax, renormalising sum and
#   divide, 2 buffer fills, moe_align_block_size, 2 Triton fused_moe kernels, silu_and_mul, moe_sum
#   (models/qwen3_moe.py:122-135, layers/fused_moe/fused_moe.py:833-840, 1360-1423);
# * moe_mla 26 (the MoE block vLLM's DeepSeek-V2/V3 class runs: grouped sigmoid top-k compiled by its own
#   @torch.compile to about 10 kernels, shared experts, routed scaling): models/deepseek_v2.py:150-178,
#   fused_moe/fused_moe.py:888-944, moe_align_block_size.py:204-236.
VLLM_EAGER_KERNELS = {"gqa": 7, "gqa_qk_norm": 23, "mla": 32, "dense": 4, "moe": 13, "moe_mla": 26}


@dataclass(frozen=True)
class DecodeProfile:
    """Iteration time of a fixed decode batch as a function of its total context c (KV tokens cached before the step).

    Continuous, nondecreasing, convex and piecewise linear: on piece i, c in [starts[i], starts[i+1]) (the last piece
    unbounded), the time is intercepts[i] + slopes[i]·c. Each iteration adds `batch` tokens to the context.
    """

    batch: int
    starts: tuple[float, ...]
    intercepts: tuple[float, ...]
    slopes: tuple[float, ...]

    def seconds(self, total_context: float) -> float:
        """Time of one iteration at total context `total_context`."""
        i = max(0, bisect_right(self.starts, total_context) - 1)
        return self.intercepts[i] + self.slopes[i] * total_context

    def k_iterations_seconds(self, total_context: float, k: int) -> float:
        """Time of k consecutive iterations from `total_context`: a sum of arithmetic series, one per piece."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        batch, c0, total = self.batch, total_context, 0.0
        ends = (*self.starts[1:], math.inf)
        for start, end, a, b in zip(self.starts, ends, self.intercepts, self.slopes, strict=True):
            if end <= c0:
                continue
            # Iteration i runs at context c0 + i·batch; it belongs to this piece when start <= c0 + i·batch < end.
            first = max(0, math.ceil((start - c0) / batch))
            stop = k if end == math.inf else min(k, math.ceil((end - c0) / batch))
            if stop <= first:
                continue
            n = stop - first
            total += n * (a + b * c0) + b * batch * ((first + stop - 1) * n / 2)
        return total

    def iterations_within(self, total_context: float, seconds: float) -> int:
        """The largest k whose `k_iterations_seconds` fits in `seconds`, by binary search on the closed form."""
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError(f"seconds must be finite and >= 0, got {seconds}")
        fits = self.k_iterations_seconds
        # Every iteration takes at least the first one (the profile never decreases), which bounds k from above.
        high = int(seconds / self.seconds(total_context)) + 2
        while fits(total_context, high) <= seconds:
            high *= 2
        low = 0  # fits(low) <= seconds < fits(high)
        while high - low > 1:
            middle = (low + high) // 2
            if fits(total_context, middle) <= seconds:
                low = middle
            else:
                high = middle
        return low


@dataclass(frozen=True)
class EngineCosts:
    """Time of the iterations of one rollout engine: `spec` on `tp` GPUs of `rates`, experts over `ep` groups.

    The collective callables time the engine's own TP/EP group (from `rlsim.costs.collectives`): required when the
    engine spans several GPUs, unused (and may be None) on one.
    """

    spec: ModelSpec
    rates: GPURates
    tp: int = 1
    ep: int = 1
    all_reduce_seconds: CollectiveSeconds | None = None
    all_to_all_seconds: CollectiveSeconds | None = None
    overheads: EngineOverheads = EngineOverheads()
    weight_dtype_bytes: float | None = None  # None: the spec's dtype_bytes
    _profiles: dict[int, DecodeProfile] = field(default_factory=dict, init=False, repr=False, compare=False)
    # The kernels that do not depend on the context, priced: (tokens, latent rows) -> (the layers' kernel seconds,
    # the seconds of the kernels every token passes after the head, the collectives' seconds, launches); logit rows
    # -> (the output head's and sampler's seconds, launches).
    _layers_priced: dict[tuple[int, int], tuple[float, tuple[float, ...], float, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _logits_priced: dict[int, tuple[tuple[float, ...], int]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        arch = self.spec.architecture
        if self.tp < 1 or self.ep < 1:
            raise ValueError(f"tp and ep must be >= 1, got tp={self.tp}, ep={self.ep}")
        if arch.num_attention_heads % self.tp:
            raise ValueError(
                f"{self.spec.name}: {arch.num_attention_heads} attention heads cannot be split over tp={self.tp}"
            )
        if self.ep > 1:
            if arch.moe is None:
                raise ValueError(f"{self.spec.name} has no experts to split over ep={self.ep}")
            if self.tp % self.ep or arch.moe.num_experts % self.ep:
                raise ValueError(
                    f"ep={self.ep} must divide the engine's tp={self.tp} GPUs and its {arch.moe.num_experts} experts"
                )
            if self.all_to_all_seconds is None:
                raise ValueError("an engine with ep > 1 needs all_to_all_seconds for its expert group")
        if self.tp > 1 and self.all_reduce_seconds is None:
            raise ValueError(f"an engine over tp={self.tp} GPUs needs all_reduce_seconds for its TP group")

    @classmethod
    def for_placement(
        cls,
        spec: ModelSpec,
        rates: GPURates,
        placement: RolloutPlacement,
        all_reduce_seconds: CollectiveSeconds | None,
        all_to_all_seconds: CollectiveSeconds | None,
        weight_dtype_bytes: float | None = None,
        framework: Framework | None = None,
    ) -> EngineCosts:
        """The engine a scenario's rollout placement describes, with the scenario's framework overheads."""
        return cls(
            spec,
            rates,
            tp=placement.tp,
            ep=placement.ep,
            all_reduce_seconds=all_reduce_seconds,
            all_to_all_seconds=all_to_all_seconds,
            overheads=EngineOverheads.for_placement(placement, framework),
            weight_dtype_bytes=weight_dtype_bytes,
        )

    # ---- public API ---------------------------------------------------------------------------------------------

    def prefill_seconds(
        self, chunk_tokens: int, context_tokens: int = 0, sequences: int = 1, logits: bool = True
    ) -> float:
        """One iteration prefilling `sequences` sequences, each `chunk_tokens` new tokens after `context_tokens` cached.

        Attention is causal within each chunk and sees the cached tokens in full; `logits`: the chunks end their
        prompts, so each sequence's last token goes through the output head (none otherwise).
        """
        chunk = PrefillChunk(chunk_tokens, context_tokens, logits)
        return self.iteration_seconds(prefill=(chunk,) * sequences)

    def decode_iteration_seconds(self, batch: int, total_context: float) -> float:
        """One decode step of `batch` sequences whose KV caches hold `total_context` tokens together.

        Each sequence attends to its cached tokens and to the token it is decoding, so the step reads
        total_context + batch tokens of KV; the context then grows by `batch`.
        """
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        return self.iteration_seconds(batch, total_context)

    def iteration_seconds(
        self, decode_batch: int = 0, decode_context: float = 0, prefill: Iterable[PrefillChunk] = ()
    ) -> float:
        """One engine iteration: `decode_batch` decoding sequences (`decode_context` cached tokens in all) and the
        prefill chunks scheduled with them (vLLM's chunked prefill mixes both in one forward pass)."""
        if decode_batch < 0 or decode_context < 0:
            raise ValueError(f"decode_batch and decode_context must be >= 0, got {decode_batch}, {decode_context}")
        work = _work(decode_batch, prefill)
        if work.tokens == 0:
            return 0.0
        # Only attention depends on the context and the prefill's cached prefix; the rest is a function of the
        # tokens and of the rows sampled, counts that repeat across iterations, so each part is priced once per
        # value (prefill-heavy runs price tens of thousands of iterations). Summed in `_context_free_kernels`' order.
        layers, after_head, collectives, layer_launches = self._layers_priced_for(work.tokens, self._latent_rows(work))
        head, head_launches = self._logits_priced_for(work.logit_rows)
        seconds = layers
        for part in (*head, *after_head):
            seconds += part
        gpu = seconds + collectives + self._attention_seconds(work, decode_context)
        launches = layer_launches + head_launches + sum(self._attention_layers)
        busy_until, then = self._cpu_bounds(work.tokens, launches, work.decode + work.prefill_sequences)
        return max(gpu + launches * self.overheads.kernel_gap_seconds, busy_until) + then

    def decode_profile(self, batch: int) -> DecodeProfile:
        """The iteration time of a decode batch of `batch` sequences as a piecewise-linear function of its context."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        profile = self._profiles.get(batch)
        if profile is None:
            profile = self._build_profile(batch)
            self._profiles[batch] = profile
        return profile

    def decode_k_iterations_seconds(self, batch: int, total_context: float, k: int) -> float:
        """Time of k decode iterations of a fixed batch from `total_context`, the context growing by `batch` each."""
        return self.decode_profile(batch).k_iterations_seconds(total_context, k)

    def decode_iterations_within(self, batch: int, total_context: float, seconds: float) -> int:
        """How many whole decode iterations of a fixed batch from `total_context` fit in `seconds`."""
        return self.decode_profile(batch).iterations_within(total_context, seconds)

    def steady_decode_throughput(self, batch: int, context_per_sequence: float) -> float:
        """Generated tokens per second of a decode batch whose sequences each hold `context_per_sequence` tokens."""
        return batch / self.decode_iteration_seconds(batch, batch * context_per_sequence)

    def offline_output_throughput(
        self, batch: int, prompt_tokens: int, output_tokens: int, max_num_batched_tokens: int
    ) -> float:
        """Generated tokens per second of an offline wave: `batch` equal requests prefilled in chunks of at most
        `max_num_batched_tokens` tokens, then decoded together to `output_tokens` each (the first token comes from
        the prefill). A full-batch approximation of continuous batching; equal lengths, so no tail."""
        per_iteration = max(1, max_num_batched_tokens // prompt_tokens)
        full, rest = divmod(batch, per_iteration)
        prefill = full * self.prefill_seconds(prompt_tokens, 0, per_iteration)
        if rest:
            prefill += self.prefill_seconds(prompt_tokens, 0, rest)
        decode = self.decode_k_iterations_seconds(batch, batch * prompt_tokens, output_tokens - 1)
        return batch * output_tokens / (prefill + decode)

    def breakdown(
        self, decode_batch: int = 0, decode_context: float = 0, prefill: Iterable[PrefillChunk] = ()
    ) -> dict[str, float]:
        """GPU seconds of one iteration by kernel (summed over layers), without launch gaps and CPU time."""
        kernels, collectives = self._kernels(_work(decode_batch, prefill))
        parts: dict[str, float] = {}
        for kernel in kernels:
            parts[kernel.name] = parts.get(kernel.name, 0.0) + self._kernel_seconds(kernel, decode_context)
        for c in collectives:
            parts[c.name] = parts.get(c.name, 0.0) + c.count * c.seconds
        return parts

    def weight_bytes_read(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a decode iteration of `tokens` sequences (MoE: only the experts touched)."""
        layers = sum(
            self.spec.layer_count(kind) * sum(weights for *_, weights in self._layer_gemms(kind, tokens, tokens))
            for kind in ("dense", "moe")
            if self.spec.layer_count(kind)
        )
        head = self.spec.architecture.hidden_size * self.spec.architecture.vocab_size / self.tp
        return (layers + head) * self._weight_bytes

    # ---- the kernels of one iteration ---------------------------------------------------------------------------

    @property
    def _weight_bytes(self) -> float:
        return self.weight_dtype_bytes if self.weight_dtype_bytes is not None else self.spec.dtype_bytes

    def _cpu_bounds(self, tokens: int, launches: int, sequences: int) -> tuple[float, float]:
        """(time the CPU keeps the iteration from ending before, CPU time added after it) for an iteration of
        `tokens` tokens over `sequences` scheduled sequences."""
        overheads = self.overheads
        launching = 0.0 if overheads.replays_graph(tokens) else launches * overheads.kernel_launch_seconds
        step = overheads.step_cpu_seconds + overheads.step_cpu_per_sequence_seconds * sequences
        if overheads.overlap_scheduling:
            return launching + step, 0.0
        return launching, step

    def _kernel_seconds(self, kernel: _Kernel, decode_context: float) -> float:
        """Roofline time of `kernel.count` launches of a kernel at decode context `decode_context`."""
        flops = kernel.flops + kernel.flops_per_context * decode_context
        nbytes = kernel.nbytes + kernel.bytes_per_context * decode_context
        if kernel.kind == "gemm" and kernel.shape is not None:
            seconds = self.rates.gemm_seconds(*kernel.shape, nbytes=nbytes)
        elif kernel.kind == "gemm":
            seconds = self.rates.kernel_seconds(flops, nbytes)
        elif kernel.kind == "attention":
            seconds = self.rates.attention_seconds(flops, nbytes)
        else:
            seconds = self.rates.memory_seconds(nbytes)
        return kernel.count * seconds

    def _kernels(self, work: _Work) -> tuple[list[_Kernel], list[_Collective]]:
        """Kernels and collectives of one iteration on one GPU, their costs affine in the decode context."""
        kernels, collectives = self._context_free_kernels(work.tokens, work.logit_rows, self._latent_rows(work))
        return [*self._attention_kernels(work), *kernels], collectives

    def _latent_rows(self, work: _Work) -> int:
        """Rows of MLA's kv_b_proj: prefill expands the cached latents of its sequences too (0 without MLA)."""
        return work.decode + work.prefill + work.prefill_cached if self.spec.architecture.mla is not None else 0

    def _attention_kernels(self, work: _Work) -> list[_Kernel]:
        return [self._attention_kernel(work, self._kv_per_layer, layers) for layers in self._attention_layers]

    @cached_property
    def _kv_per_layer(self) -> float:
        return kv_bytes_per_token_per_gpu(self.spec, self.tp) / self.spec.architecture.num_hidden_layers

    @cached_property
    def _attention_layers(self) -> tuple[int, ...]:
        """Layers of each kind that has any (dense, then MoE): one attention kernel each per iteration."""
        return tuple(self.spec.layer_count(kind) for kind in ("dense", "moe") if self.spec.layer_count(kind))

    def _layers_priced_for(self, tokens: int, latent_rows: int) -> tuple[float, tuple[float, ...], float, int]:
        """The layers' and the after-head kernels' prices for `tokens` tokens (`_layers_priced`), priced once."""
        priced = self._layers_priced.get((tokens, latent_rows))
        if priced is None:
            kernels, collectives = self._layer_kernels(tokens, latent_rows)
            after_head = self._after_head_kernels(tokens)
            priced = self._layers_priced[tokens, latent_rows] = (
                sum(self._kernel_seconds(kernel, 0.0) for kernel in kernels),
                tuple(self._kernel_seconds(kernel, 0.0) for kernel in after_head),
                sum(c.count * c.seconds for c in collectives),
                sum(k.count for k in (*kernels, *after_head)) + sum(c.count for c in collectives),
            )
        return priced

    def _logits_priced_for(self, rows: int) -> tuple[tuple[float, ...], int]:
        """The output head's and sampler's prices for `rows` sampled rows (`_logits_priced`), priced once."""
        priced = self._logits_priced.get(rows)
        if priced is None:
            kernels = self._logit_kernels(rows)
            priced = self._logits_priced[rows] = (
                tuple(self._kernel_seconds(kernel, 0.0) for kernel in kernels), sum(k.count for k in kernels))
        return priced

    def _context_free_kernels(
        self, tokens: int, logit_rows: int, latent_rows: int
    ) -> tuple[list[_Kernel], list[_Collective]]:
        """Every kernel and collective of an iteration but attention: functions of the tokens in it, the rows whose
        logits are sampled and (MLA) the latent rows kv_b_proj expands."""
        kernels, collectives = self._layer_kernels(tokens, latent_rows)
        return [*kernels, *self._logit_kernels(logit_rows), *self._after_head_kernels(tokens)], collectives

    def _layer_kernels(self, tokens: int, latent_rows: int) -> tuple[list[_Kernel], list[_Collective]]:
        """The decoder layers' kernels (but attention) and collectives for an iteration of `tokens` tokens."""
        spec, arch, tp, act = self.spec, self.spec.architecture, self.tp, ACTIVATION_BYTES
        kv_per_layer = kv_bytes_per_token_per_gpu(spec, tp) / arch.num_hidden_layers
        kernels: list[_Kernel] = []
        collectives: list[_Collective] = []
        for kind in ("dense", "moe"):
            layers = spec.layer_count(kind)
            if not layers:
                continue
            first = len(kernels)
            for name, in_features, out_features, rows, weights in self._layer_gemms(kind, tokens, latent_rows):
                flops = 2.0 * rows * in_features * out_features
                nbytes = weights * self._weight_bytes + act * rows * (in_features + out_features)
                if name.startswith(_ROUTED_EXPERTS):
                    nbytes += self._expert_fixed_bytes(in_features * out_features, weights)
                kernels.append(_Kernel(name, layers, "gemm", flops, 0.0, nbytes, shape=(rows, out_features, in_features)))
            kernels.extend(self._elementwise_kernels(kind, tokens, kv_per_layer, layers))
            if self.overheads.launches_op_by_op:
                # The layer's priced kernels, and its attention kernel (priced apart), stand for that many of the
                # kernels eager vLLM launches; the rest are small ops, each a launch and a kernel's fixed cost.
                priced = sum(k.count for k in kernels[first:]) // layers + 1
                unpriced = self._eager_kernels_per_layer(kind) - priced
                if unpriced > 0:
                    kernels.append(_Kernel("eager_small_ops", unpriced * layers, "memory"))
            collectives.extend(self._layer_collectives(kind, tokens, layers))
        return kernels, collectives

    def _logit_kernels(self, rows: int) -> list[_Kernel]:
        """The output head (vocabulary split over tp) for the `rows` rows that are sampled, then the sampler on their
        full-vocabulary logits."""
        if not rows:
            return []
        arch, act = self.spec.architecture, ACTIVATION_BYTES
        hidden, vocab = arch.hidden_size, arch.vocab_size
        head_weights = hidden * vocab / self.tp
        flops = 2.0 * rows * head_weights
        nbytes = head_weights * self._weight_bytes + act * rows * (hidden + vocab / self.tp)
        return [_Kernel("lm_head", 1, "gemm", flops, 0.0, nbytes, shape=(rows, vocab / self.tp, hidden)),
                _Kernel("sampler", 1, "memory", nbytes=SAMPLER_LOGIT_PASSES * LOGIT_BYTES * rows * vocab)]

    def _after_head_kernels(self, tokens: int) -> list[_Kernel]:
        """The embedding lookup and the final norm, for every token (listed after the head, as they are summed)."""
        nbytes = 2 * ACTIVATION_BYTES * tokens * self.spec.architecture.hidden_size
        return [_Kernel("embedding", 1, "memory", nbytes=nbytes), _Kernel("final_norm", 1, "memory", nbytes=nbytes)]

    def _expert_fixed_bytes(self, per_expert: float, weights: float) -> float:
        """The fused-MoE kernel's fixed times (`GPURates.moe_call_seconds` per call, `moe_expert_seconds` per expert
        touched) as the bytes the stream would move meanwhile, shared between the kernel's GEMMs by their weights:
        `per_expert` is one GEMM's weight elements for one expert, `weights` over the experts it touches."""
        rates = self.rates
        share = per_expert / self._expert_weight_elements
        experts_touched = weights / per_expert
        return share * (rates.moe_call_seconds + experts_touched * rates.moe_expert_seconds) * rates.hbm_bytes_per_s

    @cached_property
    def _expert_weight_elements(self) -> float:
        """Weight elements of one routed expert on this GPU (all its GEMMs, after TP slicing)."""
        gemms = self._layer_gemms("moe", 1, 0)
        return sum(i * o for name, i, o, _, _ in gemms if name.startswith(_ROUTED_EXPERTS))

    def _eager_kernels_per_layer(self, kind: str) -> int:
        """Kernels eager vLLM launches for one layer of `kind` in a decode step (`VLLM_EAGER_KERNELS`): its attention
        half by attention type, its MLP half dense or MoE (for MLA models, the MoE block of vLLM's DeepSeek class)."""
        arch = self.spec.architecture
        attention = "mla" if arch.mla is not None else "gqa_qk_norm" if arch.qk_norm else "gqa"
        mlp = "dense" if kind == "dense" else "moe_mla" if arch.mla is not None else "moe"
        return VLLM_EAGER_KERNELS[attention] + VLLM_EAGER_KERNELS[mlp]

    @cached_property
    def _gemm_shapes(self) -> dict[str, tuple]:
        # The spec rebuilds its shapes on every call; an engine prices thousands of iterations.
        return {kind: self.spec.layer_gemm_shapes(kind) for kind in ("dense", "moe") if self.spec.layer_count(kind)}

    def _layer_gemms(self, kind: str, tokens: int, latent_rows: int) -> list[tuple[str, float, float, float, float]]:
        """(name, in_features, out_features, rows M, weight elements read) per fused GEMM of one layer on one GPU."""
        arch, tp, ep = self.spec.architecture, self.tp, self.ep
        fused: dict[str, list[float]] = {}  # name -> [in_features, out_features, rows, weight elements]
        for shape in self._gemm_shapes[kind]:
            split = _SPLIT.get(shape.name)
            if split is None:
                raise ValueError(f"no tensor-parallel layout is known for weight {shape.name!r}")
            in_features, out_features, rows = float(shape.in_features), float(shape.out_features), float(tokens)
            if split == "column":
                # K and V heads split until each GPU holds one, then are replicated.
                ways = min(tp, arch.num_key_value_heads) if shape.name in ("self_attn.k_proj", "self_attn.v_proj") else tp
                out_features /= ways
            elif split == "row":
                in_features /= tp
            if shape.name == "self_attn.kv_b_proj":
                # Decode multiplies the queries by it (MLA's absorbed form); prefill expands the cached latents of its
                # sequences as well as the new ones (vLLM's MLA prefill path).
                rows = float(latent_rows)
            weights = in_features * out_features
            if split == "experts":
                assert arch.moe is not None
                slices = tp // ep  # GPUs sharing each expert
                if shape.name.endswith("down_proj"):
                    in_features /= slices
                else:
                    out_features /= slices
                touched = arch.moe.experts_touched(tokens)
                weights = in_features * out_features * touched / ep
                rows = tokens * shape.active / ep  # (token, expert) assignments this GPU's experts serve
            group = _FUSED.get(shape.name, shape.name)
            entry = fused.setdefault(group, [in_features, 0.0, rows, 0.0])
            entry[1] += out_features
            entry[3] += weights
        return [(name, i, o, m, w) for name, (i, o, m, w) in fused.items()]

    @cached_property
    def _attention_widths(self) -> tuple[float, float, float]:
        """(FLOPs per (query, key) pair in the expanded form, in the absorbed form, query/output bytes per token over
        ACTIVATION_BYTES) of one layer's attention on one GPU: fixed for the engine, asked at every iteration."""
        arch, spec = self.spec.architecture, self.spec
        heads = arch.num_attention_heads / self.tp
        mla = arch.mla
        # Expanded form (prefill): per head, scores over qk dims and values over v dims; spec counts it per pair.
        expanded = spec.attention_flops_per_context_token / arch.num_hidden_layers / self.tp
        if mla is not None:
            # Absorbed form (decode): queries and values live in the compressed latent, scores also see the RoPE key.
            absorbed = 2 * heads * (2 * mla.kv_lora_rank + mla.qk_rope_head_dim)
            query_width = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim)
        else:
            absorbed = expanded
            query_width = heads * 2 * arch.attention_head_dim
        return expanded, absorbed, query_width

    def _attention_seconds(self, work: _Work, decode_context: float) -> float:
        """The attention kernels' time in an iteration at `decode_context`: one layer's kernel priced once, times the
        layers of each kind (`_attention_kernels` builds one kernel per kind; every iteration asks for this)."""
        seconds = self._kernel_seconds(self._attention_kernel(work, self._kv_per_layer, 1), decode_context)
        return sum(layers * seconds for layers in self._attention_layers)

    def _attention_kernel(self, work: _Work, kv_per_layer: float, layers: int) -> _Kernel:
        """Fused attention of one layer on one GPU: KV reads of every key attended, FLOPs per (query, key) pair."""
        expanded, absorbed, query_width = self._attention_widths
        decode_keys = work.decode  # plus the context c: each sequence also attends to the token it decodes
        flops = absorbed * decode_keys + expanded * work.prefill_pairs
        keys_read = decode_keys + work.prefill + work.prefill_cached
        nbytes = kv_per_layer * keys_read + ACTIVATION_BYTES * work.tokens * query_width
        return _Kernel("attention", layers, "attention", flops, absorbed, nbytes, kv_per_layer)

    def _elementwise_kernels(self, kind: str, tokens: int, kv_per_layer: float, layers: int) -> list[_Kernel]:
        """Memory-bound kernels of one layer: the two fused residual-add + RMSNorms, RoPE with the KV-cache write,
        the SwiGLU activation and, in MoE layers, routing and combining the experts' outputs."""
        arch, tp, act = self.spec.architecture, self.tp, ACTIVATION_BYTES
        hidden = arch.hidden_size
        heads = arch.num_attention_heads / tp
        if arch.mla is not None:
            rope_width = heads * arch.mla.qk_rope_head_dim + arch.mla.qk_rope_head_dim
        else:
            kv_heads = max(1.0, arch.num_key_value_heads / tp)
            rope_width = (heads + kv_heads) * arch.attention_head_dim
        kernels = [
            # Each reads the input and the residual and writes both back: 4 hidden vectors per token.
            _Kernel("norms", 2 * layers, "memory", nbytes=4 * act * tokens * hidden),
            # RoPE reads and writes the queries and keys; the cache write reads K and V and stores them.
            _Kernel("rope_kv_write", layers, "memory", nbytes=tokens * (2 * act * rope_width + 2 * kv_per_layer)),
        ]
        if kind == "dense":
            width = arch.intermediate_size / tp
            kernels.append(_Kernel("activation", layers, "memory", nbytes=3 * act * tokens * width))
            return kernels
        moe = arch.moe
        assert moe is not None
        # SwiGLU reads gate and up and writes their product, for every (token, expert) assignment.
        width = (moe.num_experts_per_tok * moe.moe_intermediate_size + moe.n_shared_experts * moe.moe_intermediate_size)
        kernels.append(_Kernel("activation", layers, "memory", nbytes=3 * act * tokens * width / tp))
        # Top-k over fp32 router logits, then gathering tokens for their experts and summing the k outputs back.
        routing = tokens * (LOGIT_BYTES * moe.num_experts + 2 * act * moe.num_experts_per_tok * hidden / self.ep)
        kernels.append(_Kernel("moe_routing", layers, "memory", nbytes=routing))
        return kernels

    def _layer_collectives(self, kind: str, tokens: int, layers: int) -> list[_Collective]:
        """TP all-reduces after attention and after the FFN; an EP layer dispatches and combines by all-to-all."""
        if self.tp == 1:
            return []
        assert self.all_reduce_seconds is not None
        hidden_bytes = ACTIVATION_BYTES * tokens * self.spec.architecture.hidden_size
        all_reduce = self.all_reduce_seconds(hidden_bytes)
        if kind == "moe" and self.ep > 1:
            assert self.all_to_all_seconds is not None and self.spec.architecture.moe is not None
            # Each GPU dispatches its 1/tp share of the tokens to the k experts each is routed to, and gets them back.
            share = hidden_bytes / self.tp * self.spec.architecture.moe.num_experts_per_tok
            return [
                _Collective("all_reduce", layers, all_reduce),
                _Collective("all_to_all", 2 * layers, self.all_to_all_seconds(share)),
            ]
        return [_Collective("all_reduce", 2 * layers, all_reduce)]

    # ---- the closed form ----------------------------------------------------------------------------------------

    def _build_profile(self, batch: int) -> DecodeProfile:
        """Sum every kernel's upper envelope over c >= 0, then apply the CPU bounds: still convex piecewise linear."""
        work = _work(batch, ())
        kernels, collectives = self._kernels(work)
        rates = self.rates
        terms: list[list[tuple[float, float]]] = []  # per kernel, the affine pieces (intercept, slope) it maxes over
        constant = sum(c.count * c.seconds for c in collectives)
        launches = sum(k.count for k in kernels) + sum(c.count for c in collectives)
        constant += launches * self.overheads.kernel_gap_seconds
        for kernel in kernels:
            if kernel.kind == "attention":
                memory = (
                    kernel.count * rates.attention_memory_seconds(kernel.nbytes),
                    kernel.count * kernel.bytes_per_context / rates.attention_bytes_per_s,
                )
            else:
                memory = (
                    kernel.count * rates.memory_seconds(kernel.nbytes),
                    kernel.count * kernel.bytes_per_context / rates.hbm_bytes_per_s,
                )
            if kernel.kind == "memory":
                terms.append([memory])
                continue
            if kernel.shape is not None:
                # A weight GEMM: fill + max(quantized compute, memory), constant in the context.
                compute_seconds = rates.gemm_compute_seconds(*kernel.shape)
                terms.append([
                    (kernel.count * (GEMM_FILL_S + compute_seconds), 0.0),
                    (kernel.count * (GEMM_FILL_S + rates.memory_seconds(kernel.nbytes)), memory[1]),
                ])
                continue
            rate = rates.gemm_flops if kernel.kind == "gemm" else rates.attention_flops
            compute = (
                kernel.count * (GEMM_FILL_S + kernel.flops / rate),
                kernel.count * kernel.flops_per_context / rate,
            )
            terms.append([compute, memory])

        breaks = {0.0}
        for pieces in terms:
            for (a1, b1), (a2, b2) in zip(pieces, pieces[1:], strict=False):
                if b1 != b2:
                    crossing = (a2 - a1) / (b1 - b2)
                    if crossing > 0:
                        breaks.add(crossing)
        starts = sorted(breaks)
        intercepts, slopes = [], []
        for i, start in enumerate(starts):
            probe = (start + starts[i + 1]) / 2 if i + 1 < len(starts) else start + 1.0
            a_sum, b_sum = constant, 0.0
            for pieces in terms:
                a, b = max(pieces, key=lambda p: p[0] + p[1] * probe)
                a_sum += a
                b_sum += b
            intercepts.append(a_sum)
            slopes.append(b_sum)

        busy_until, then = self._cpu_bounds(batch, launches, batch)
        return _apply_cpu_bounds(batch, starts, intercepts, slopes, busy_until, then)


def _work(decode_batch: int, prefill: Iterable[PrefillChunk]) -> _Work:
    new = cached = pairs = logits = sequences = 0
    for chunk in prefill:
        tokens = chunk.tokens
        if tokens < 0 or chunk.cached_tokens < 0:
            raise ValueError(f"prefill chunk sizes must be >= 0, got {chunk}")
        if tokens:
            new += tokens
            cached += chunk.cached_tokens
            pairs += tokens * chunk.cached_tokens + tokens * (tokens + 1) // 2
            logits += chunk.logits
            sequences += 1
    return _Work(decode_batch, new, cached, float(pairs), logits, sequences)


def _apply_cpu_bounds(
    batch: int, starts: list[float], intercepts: list[float], slopes: list[float], floor: float, then: float
) -> DecodeProfile:
    """max(profile, floor) + then. The profile never decreases, so the floor covers one leading stretch of context."""
    out_starts: list[float] = []
    out_a: list[float] = []
    out_b: list[float] = []
    ends = (*starts[1:], math.inf)
    for start, end, a, b in zip(starts, ends, intercepts, slopes, strict=True):
        at_end = a + b * end if end != math.inf else (math.inf if b > 0 else a)
        if at_end <= floor:
            continue  # the whole piece lies under the floor
        if a + b * start < floor:
            start = (floor - a) / b  # the piece rises through the floor (b > 0, since it ends above it)
        out_starts.append(start)
        out_a.append(a + then)
        out_b.append(b)
    if not out_starts or out_starts[0] > 0:
        out_starts.insert(0, 0.0)
        out_a.insert(0, floor + then)
        out_b.insert(0, 0.0)
    return DecodeProfile(batch, tuple(out_starts), tuple(out_a), tuple(out_b))


def kv_cache_tokens(
    spec: ModelSpec, gpu_memory_bytes: float, placement: RolloutPlacement, weight_dtype_bytes: float | None = None
) -> int:
    """KV-cache tokens one engine holds: its HBM share less weights and workspace (as `costs.memory` counts them)."""
    weight_bytes = spec.dtype_bytes if weight_dtype_bytes is None else weight_dtype_bytes
    free = (
        placement.gpu_memory_utilization * gpu_memory_bytes
        - spec.total_params * weight_bytes / placement.tp
        - rollout_workspace_bytes(spec, placement)
    )
    return max(0, int(free // kv_bytes_per_token_per_gpu(spec, placement.tp)))
