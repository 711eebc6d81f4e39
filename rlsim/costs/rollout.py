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
add a small kernel each, and the CPU pays every kernel's Python and launch (`eager_op_cpu_seconds`). The CPU launches
while the GPU runs what it has launched, so an eager step takes the longer of the two; a small batch, or a model split
over many GPUs, leaves each GPU waiting for the CPU.

Fast advance. For a fixed decode batch, every kernel's time is a maximum of affine functions of the batch's total
context, so the iteration time is a continuous, nondecreasing, convex piecewise-linear function of it (`DecodeProfile`).
Context grows by `batch` tokens per iteration, so the time of k iterations is a sum of arithmetic series, one per
linear piece, and its inverse is a binary search over that closed form: no loop over iterations anywhere.

Left out: CUDA-graph padding of the batch to a captured size, the gather of vocabulary-split logits, the embedding
all-reduce, and expert load imbalance (tokens are assumed spread evenly over the EP groups). Preemption, prefix
sharing and chunking decisions belong to the simulated engine, which calls these functions.

The parts, each in its own module: `engine_kernels` (the kernels of an iteration and their roofline time) and
`decode_profile` (the closed form of fast advance). `EngineCosts` composes them and prices iterations.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, NamedTuple, cast

import numpy as np
from librt.vecs import vec
from mypy_extensions import i64, mypyc_attr

from rlsim.costs.compute import GPURates
from rlsim.costs.decode_profile import DecodeProfile, combined_profile, decode_profile
from rlsim.costs.engine_kernels import CollectiveSeconds, EngineKernels, Kernel
from rlsim.costs.iteration_work import SingleQueryAttention, Work, chunk_pairs, prefill_counts, work_of
from rlsim.costs.layout import EngineLayout, InferenceEngine
from rlsim.costs.memo import BlockMemo, Memo
from rlsim.costs.memory import kv_bytes_per_token_per_gpu, rollout_workspace_bytes
from rlsim.costs.speculative import Speculation
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS
from rlsim.overheads import (
    CUDA_GRAPH_MAX_TOKENS,
    EAGER_OP_CPU_S,
    ENGINE_STEP_CPU_PER_SEQUENCE_S,
    ENGINE_STEP_CPU_S,
    KERNEL_GAP_S,
    KERNEL_LAUNCH_S,
)

# Names other modules import from here: the rollout cost model's public face.
__all__ = ["CollectiveSeconds", "DecodeProfile", "EngineCosts", "EngineOverheads", "IterationCosts", "PrefillChunk",
           "kv_cache_tokens"]

# The kernels that do not depend on the context, priced: the layers' kernel seconds, the seconds of the kernels every
# token passes after the head, and their launches; the layers' collectives' seconds and launches; and the output
# head's and sampler's seconds with their launches.
LayersPriced = tuple[float, tuple[float, ...], int]
CollectivesPriced = tuple[float, int]
LogitsPriced = tuple[tuple[float, ...], int]
# An iteration's parts but attention, priced: the GPU seconds to add attention's to, the launch gaps' seconds to add
# then, and the CPU bounds (`EngineOverheads.cpu_bounds`).
ContextFreePriced = tuple[float, float, float, float]
ContextFreeKey = int | tuple[int, int, int, int]  # `context_free_key`'s

# Token counts an engine's layers are priced for at once (`EngineCosts._price_layer_block`): numpy prices a block in
# about the time the scalar path takes for a few counts, and a run's iterations ask for thousands of distinct counts
# up to max_num_batched_tokens and the decode rows beside them (pricing the production step's range, 8,704 counts,
# takes 2.8 ms in blocks of 2,048, 4.8 ms in blocks of 512 and 5.1 ms in blocks of 8,192).
TOKEN_BLOCK = 2048
# Context-free parts an engine remembers (`EngineCosts._price_context_free`), then afresh: a key per (tokens, rows
# sampled, sequences), a few thousand in a production step, but MLA's latent rows grow with the cached prefixes.
CONTEXT_FREE_KEYS = 1 << 16
# A context-free shape's key is one int, (tokens, logit rows, sequences) in this radix, while each is below it and no
# MLA latent rows are expanded (a tuple of the four otherwise): an int hashes and compares in a few instructions, a
# tuple of four after boxing each, and a production step looks up tens of thousands of shapes.
CONTEXT_FREE_RADIX: Final = 1 << 20  # Final: compiled, a constant rather than a global looked up each time
# Slots of an engine's cache of context-free parts in front of the memo (`ContextFreeCache`): the shapes a
# production step asks in turn fit, at 160 KB an engine's cost model.
CONTEXT_FREE_CACHE_SLOTS: Final = 1 << 12


@dataclass(frozen=True)
class EngineOverheads:
    """CPU-side costs of an engine, the same for every GPU and model (defaults and their sources: rlsim.overheads; a
    scenario's `framework:` section sets them through rlsim.pricing)."""

    step_cpu_seconds: float = ENGINE_STEP_CPU_S
    step_cpu_per_sequence_seconds: float = ENGINE_STEP_CPU_PER_SEQUENCE_S
    overlap_scheduling: bool = True  # CPU work of step n+1 runs while the GPU computes step n
    kernel_launch_seconds: float = KERNEL_LAUNCH_S
    # CPU time per kernel when vLLM launches every op of a layer from Python (enforce_eager), in place of
    # kernel_launch_seconds.
    eager_op_cpu_seconds: float = EAGER_OP_CPU_S
    kernel_gap_seconds: float = KERNEL_GAP_S
    cuda_graphs: bool = True
    cuda_graph_max_tokens: int = CUDA_GRAPH_MAX_TOKENS
    # Without CUDA graphs vLLM also runs without torch.compile (enforce_eager), so its PyTorch-native ops launch one
    # kernel each (`VLLM_EAGER_KERNELS`); counted for vLLM only.
    engine: InferenceEngine = "vllm"

    @property
    def launches_op_by_op(self) -> bool:
        """Whether every PyTorch-native op of a layer is its own kernel: vLLM in eager mode, and HF generate()."""
        return self.engine == "hf" or (self.engine == "vllm" and not self.cuda_graphs)

    @property
    def largest_graph_tokens(self) -> int:
        """Most tokens an iteration can have and still replay a captured CUDA graph; -1 when none replays (no graphs,
        or HF generate(), which runs eagerly whatever `cuda_graphs` says)."""
        return self.cuda_graph_max_tokens if self.cuda_graphs and self.engine != "hf" else -1

    @property
    def launch_cpu_seconds(self) -> float:
        """CPU time per kernel of an iteration no graph replays: each op's Python and launch when vLLM runs eagerly,
        a launch from compiled code (or from SGLang's engine) otherwise."""
        return self.eager_op_cpu_seconds if self.launches_op_by_op else self.kernel_launch_seconds

    def replays_graph(self, tokens: float) -> bool:
        """Whether an iteration of `tokens` tokens replays a captured CUDA graph instead of launching kernels."""
        return tokens <= self.largest_graph_tokens

    def cpu_bounds(self, tokens: int, launches: int, sequences: int) -> tuple[float, float]:
        """(time the CPU keeps the iteration from ending before, CPU time added after it) for an iteration of
        `tokens` tokens, `launches` kernels, over `sequences` scheduled sequences: asked by every iteration shape an
        engine prices first, so here, compiled with the engine (`rlsim.compiled_engine`)."""
        launching = launches * self.cpu_seconds_per_launch(tokens)
        step = self.step_cpu_seconds + self.step_cpu_per_sequence_seconds * sequences
        if self.overlap_scheduling:
            return launching + step, 0.0
        return launching, step

    def cpu_seconds_per_launch(self, tokens: float) -> float:
        """CPU time the engine spends on each kernel of an iteration of `tokens` tokens: none when a captured CUDA
        graph replays them, else `launch_cpu_seconds`."""
        return 0.0 if self.replays_graph(tokens) else self.launch_cpu_seconds


class PrefillChunk(NamedTuple):
    """New prompt tokens of one sequence in an iteration, after `cached_tokens` of it already in the KV cache.

    `logits`: the chunk ends the prompt, so its last token goes through the output head and is sampled (the first
    generated token); an earlier chunk of a chunked prefill produces no logits. The pricing reads a chunk by
    position (`ChunkFields`), so the engine, which builds one per sequence per prefill iteration, passes plain tuples:
    building a named tuple is a call of its Python `__new__`.
    """

    tokens: int
    cached_tokens: int = 0
    logits: bool = True


ChunkFields = tuple[int, int, bool]  # a `PrefillChunk`'s fields by position: (tokens, cached_tokens, logits)


@mypyc_attr(allow_interpreted_subclasses=True)
class IterationCosts:
    """What a simulated engine asks its cost model: the time of its iterations. `EngineCosts` answers; a test may
    subclass this with times of its own (an interpreted subclass's methods are the ones called).

    A base class rather than a Protocol for the compiled engine's sake (`rlsim.compiled_engine`): it calls a compiled
    class's methods directly, its numbers passed unboxed, where a Protocol's method is a Python call, boxing every
    argument (a production step asks tens of thousands of iteration times)."""

    __slots__ = ()

    def iteration_seconds(
        self, decode_batch: int = 0, decode_context: float = 0, prefill: Iterable[ChunkFields] = ()
    ) -> float:
        """One iteration of `decode_batch` decodes over `decode_context` cached tokens and these prefill chunks."""
        raise NotImplementedError

    def chunk_iteration_seconds(self, decode_batch: i64, decode_context: float, tokens: i64, cached_tokens: i64,
                                logits: bool) -> float:
        """`iteration_seconds` with one prefill chunk of these fields."""
        raise NotImplementedError

    def counted_iteration_seconds(self, decode_batch: i64, decode_context: float, tokens: i64, cached_tokens: i64,
                                  pairs: i64, logits: i64, sequences: i64) -> float:
        """`iteration_seconds` with prefill chunks given by their counts, `prefill_counts`' five (integer sums, the
        same whatever the chunks' order), at least one chunk of at least one token."""
        raise NotImplementedError

    def decode_k_iterations_seconds(self, batch: int, total_context: float, k: int) -> float:
        """`k` decode iterations of a fixed batch from `total_context`, the context growing by `batch` each."""
        raise NotImplementedError

    def decode_iterations_within(self, batch: int, total_context: float, seconds: float) -> int:
        """How many whole decode iterations of a fixed batch from `total_context` fit in `seconds`."""
        raise NotImplementedError


@dataclass(frozen=True)
class EngineCosts(IterationCosts):
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
    # The decoder layers' weights and inputs quantized (W8A8, W4A4): their GEMMs' rates (EngineKernels).
    quantized_rates: GPURates | None = None
    speculation: Speculation | None = None  # speculative decoding (rlsim.costs.speculative)
    expert_load_imbalance: float = 1.0  # the busiest expert-parallel group's assignments over the mean (EngineKernels)
    lora_rank: int = 0  # an unmerged LoRA adapter served beside the weights (EngineKernels)
    _kernels: EngineKernels = field(init=False, repr=False, compare=False)
    # batch -> its decode profile; tokens -> `LayersPriced` (priced by blocks of token counts) or, for MLA, whose
    # kv_b_proj also expands cached latents, (tokens, latent rows) -> `LayersPriced`; tokens -> `CollectivesPriced`;
    # logit rows -> `LogitsPriced`.
    _profile_memo: Memo[int, DecodeProfile] = field(init=False, repr=False, compare=False)
    _latent: bool = field(init=False, repr=False, compare=False)
    _layers_memo: BlockMemo[LayersPriced] = field(init=False, repr=False, compare=False)
    _latent_layers_memo: Memo[tuple[int, int], LayersPriced] = field(init=False, repr=False, compare=False)
    _collectives_memo: Memo[int, CollectivesPriced] = field(init=False, repr=False, compare=False)
    _logits_memo: Memo[int, LogitsPriced] = field(init=False, repr=False, compare=False)
    # `context_free_key`(tokens, logit rows, sequences, MLA latent rows) -> `ContextFreePriced`
    _context_free_memo: Memo[ContextFreeKey, ContextFreePriced] = field(init=False, repr=False, compare=False)
    # The kernels' attention of single-query iterations, kept here: an attribute of a compiled class is read directly.
    _single_query_attention: SingleQueryAttention = field(init=False, repr=False, compare=False)
    _context_free_cache: ContextFreeCache = field(init=False, repr=False, compare=False)

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
        weight_bytes = self.weight_dtype_bytes if self.weight_dtype_bytes is not None else self.spec.dtype_bytes
        kernels = EngineKernels(self.spec, self.rates, self.tp, self.ep, self.all_reduce_seconds,
                                self.all_to_all_seconds, self.overheads, weight_bytes, self.quantized_rates,
                                self.expert_load_imbalance, self.lora_rank)
        parts = {"_kernels": kernels, "_profile_memo": Memo(self._decode_profile),
                 "_latent": arch.mla is not None, "_layers_memo": BlockMemo(self._price_layer_block, TOKEN_BLOCK),
                 "_latent_layers_memo": Memo(self._price_latent_layers),
                 "_collectives_memo": Memo(self._price_collectives), "_logits_memo": Memo(self._price_logits),
                 "_context_free_memo": Memo(self._price_context_free, CONTEXT_FREE_KEYS),
                 "_single_query_attention": kernels.single_query_attention,
                 "_context_free_cache": ContextFreeCache()}
        for name, part in parts.items():
            object.__setattr__(self, name, part)

    @classmethod
    def for_layout(
        cls,
        spec: ModelSpec,
        rates: GPURates,
        layout: EngineLayout,
        all_reduce_seconds: CollectiveSeconds | None,
        all_to_all_seconds: CollectiveSeconds | None,
        overheads: EngineOverheads,
        weight_dtype_bytes: float | None = None,
        quantized_rates: GPURates | None = None,
        speculation: Speculation | None = None,
        expert_load_imbalance: float = 1.0,
        lora_rank: int = 0,
    ) -> EngineCosts:
        """The engines of `layout`, with `overheads` (rlsim.pricing.engine_overheads: the scenario's framework for
        the layout's engine kind and CUDA graphs)."""
        return cls(spec, rates, tp=layout.tp, ep=layout.ep, all_reduce_seconds=all_reduce_seconds,
                   all_to_all_seconds=all_to_all_seconds, overheads=overheads, weight_dtype_bytes=weight_dtype_bytes,
                   quantized_rates=quantized_rates, speculation=speculation,
                   expert_load_imbalance=expert_load_imbalance, lora_rank=lora_rank)

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
        self, decode_batch: int = 0, decode_context: float = 0, prefill: Iterable[ChunkFields] = ()
    ) -> float:
        """One engine iteration: `decode_batch` decoding sequences (`decode_context` cached tokens in all) and the
        prefill chunks scheduled with them (vLLM's chunked prefill mixes both in one forward pass), each a
        `PrefillChunk` or a plain tuple of its fields."""
        if decode_batch < 0 or decode_context < 0:
            raise ValueError(f"decode_batch and decode_context must be >= 0, got {decode_batch}, {decode_context}")
        # One query per decode prices from `work_of`'s counts alone (`_single_query_seconds`): no `Work` is built.
        new, cached, pairs, logits, sequences = prefill_counts(prefill)
        if not sequences:
            if not decode_batch:
                return 0.0
            speculation = self.speculation
            if speculation is not None:
                # A mean speculative step per token (rlsim.costs.speculative): verify, drafts, over the tokens gained.
                verify = self._verify_seconds(work_of(decode_batch, (), speculation.verified), decode_context)
                draft = 0.0
                if speculation.draft is not None:
                    draft = speculation.drafted * speculation.draft.iteration_seconds(decode_batch, decode_context)
                return (verify + draft) / speculation.tokens_per_step
        return self._single_query_seconds(decode_batch, decode_context, new, cached, float(pairs), logits, sequences)

    def chunk_iteration_seconds(self, decode_batch: i64, decode_context: float, tokens: i64, cached_tokens: i64,
                                logits: bool) -> float:
        """`iteration_seconds(decode_batch, decode_context, [PrefillChunk(tokens, cached_tokens, logits)])` to the
        bit, without building the chunk or summing a list of them: most iterations of a long prefill are one chunk
        beside the decodes (`rlsim.sim.engine.prefill_run` prices tens of thousands in a step)."""
        if decode_batch < 0 or decode_context < 0 or tokens < 1 or cached_tokens < 0:
            return self.iteration_seconds(decode_batch, decode_context, (PrefillChunk(tokens, cached_tokens, logits),))
        return self._single_query_seconds(decode_batch, decode_context, tokens, cached_tokens,
                                          float(chunk_pairs(tokens, cached_tokens)),
                                          1 if logits else 0, 1)

    def counted_iteration_seconds(self, decode_batch: i64, decode_context: float, tokens: i64, cached_tokens: i64,
                                  pairs: i64, logits: i64, sequences: i64) -> float:
        """`iteration_seconds` of prefill chunks with these counts to the bit, without the chunks: a prefill run
        (`rlsim.sim.engine.prefill_run`) sums them as it plans an iteration's chunks, tens of thousands of iterations
        of several chunks in a ×4-length step, rather than building a tuple a chunk for `prefill_counts` to read."""
        if decode_batch < 0 or decode_context < 0 or tokens < 1 or cached_tokens < 0 or sequences < 1:
            raise ValueError(f"counted_iteration_seconds needs decode_batch, decode_context >= 0 and a chunk, got "
                             f"{decode_batch}, {decode_context}, {tokens} tokens, {cached_tokens} cached, "
                             f"{sequences} sequences")
        return self._single_query_seconds(decode_batch, decode_context, tokens, cached_tokens, float(pairs), logits,
                                          sequences)

    def _single_query_seconds(self, decode_rows: i64, decode_context: float, prefill: i64, prefill_cached: i64,
                              prefill_pairs: float, prefill_logits: i64, prefill_sequences: i64) -> float:
        """One forward pass of `decode_rows` decodes asking one query each and prefill chunks of these counts
        (`Work`'s fields of those names) at `decode_context`, without building the `Work`."""
        # Only attention depends on the context and the prefill's cached prefix; the rest is a function of the
        # tokens, the rows sampled and the sequences scheduled, counts that repeat across iterations, so it is priced
        # once per value (prefill-heavy runs price tens of thousands of iterations).
        tokens, logit_rows, sequences = decode_rows + prefill, decode_rows + prefill_logits, decode_rows + prefill_sequences
        if self._latent or not packs_context_free_key(tokens, logit_rows, sequences):
            latent_rows = tokens + prefill_cached if self._latent else 0  # `EngineKernels.latent_rows`
            before, gaps, busy_until, then = self._context_free_memo[context_free_key(tokens, logit_rows, sequences,
                                                                                       latent_rows)]
        else:
            key = packed_context_free_key(tokens, logit_rows, sequences)
            cache = self._context_free_cache
            index = context_free_cache_index(tokens, logit_rows, sequences)
            if cache.keys[index] == key:
                before, gaps, busy_until, then = (cache.before[index], cache.gaps[index], cache.busy_until[index],
                                                  cache.then[index])
            else:
                before, gaps, busy_until, then = self._context_free_memo[key]
                cache.store(index, key, before, gaps, busy_until, then)
        attention = self._single_query_attention.seconds(decode_rows, prefill, prefill_cached, prefill_pairs,
                                                         decode_context)
        return max(before + attention + gaps, busy_until) + then

    def _verify_seconds(self, work: Work, decode_context: float) -> float:
        """A speculative verify step (`work` of more than one query per decode, no prefill) at `decode_context`:
        `_single_query_seconds`' sum, with attention over every query."""
        kernels = self._kernels
        latent_rows = kernels.latent_rows(work) if self._latent else 0
        before, gaps, busy_until, then = self._context_free_memo[context_free_key(
            work.tokens, work.logit_rows, work.decode + work.prefill_sequences, latent_rows)]
        attention = kernels.attention_seconds(work, decode_context)
        return max(before + attention + gaps, busy_until) + then

    def decode_profile(self, batch: int) -> DecodeProfile:
        """The iteration time of a decode batch of `batch` sequences as a piecewise-linear function of its context."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        return self._profile_memo[batch]

    def decode_k_iterations_seconds(self, batch: int, total_context: float, k: int) -> float:
        """Time of k decode iterations of a fixed batch from `total_context`, the context growing by `batch` each."""
        profile = self._profile_memo.get(batch)  # a remembered profile without a call: every stretch planned asks
        if profile is None:
            profile = self.decode_profile(batch)
        return profile.k_iterations_seconds(total_context, k)

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
        self, decode_batch: int = 0, decode_context: float = 0, prefill: Iterable[ChunkFields] = ()
    ) -> dict[str, float]:
        """GPU seconds of one iteration by kernel (summed over layers), without launch gaps and CPU time."""
        kernels, collectives = self._kernels.kernels(work_of(decode_batch, prefill))
        parts: dict[str, float] = {}
        for kernel in kernels:
            parts[kernel.name] = parts.get(kernel.name, 0.0) + self._kernels.kernel_seconds(kernel, decode_context)
        for c in collectives:
            parts[c.name] = parts.get(c.name, 0.0) + c.count * c.seconds
        return parts

    def weight_bytes_read(self, tokens: int) -> float:
        """Weight bytes one GPU reads in a decode iteration of `tokens` sequences (MoE: only the experts touched)."""
        kernels = self._kernels
        # cast: mypy types the inner sum `float | Literal[0]`, and mypyc's compiled outer sum of `int * (float | int)`
        # expects an int and raises on the float it gets (mypyc 2.4); typed float, both sums stay floats.
        layers = sum(
            self.spec.layer_count(kind)
            * cast(float, sum(weights for *_, weights in kernels.layer_gemms(kind, tokens, tokens)))
            for kind in LAYER_KINDS
            if self.spec.layer_count(kind)
        )
        head = self.spec.architecture.hidden_size * self.spec.architecture.vocab_size / self.tp
        if kernels.head_weight_bytes == kernels.weight_bytes:
            return (layers + head) * kernels.weight_bytes
        return layers * kernels.weight_bytes + head * kernels.head_weight_bytes

    # ---- the iteration's parts, priced once per value -----------------------------------------------------------

    def _decode_profile(self, batch: int) -> DecodeProfile:
        speculation = self.speculation
        if speculation is None:
            return decode_profile(self._kernels, batch)
        share = 1 / speculation.tokens_per_step
        parts = [(share, decode_profile(self._kernels, batch, speculation.verified))]
        if speculation.draft is not None:
            parts.append((share * speculation.drafted, speculation.draft.decode_profile(batch)))
        return combined_profile(parts, batch)

    def _price_layer_block(self, tokens: range) -> LayerBlock:
        """`LayersPriced` of every count in `tokens`, by numpy over the counts: the kernels built over an array of them
        and priced element by element with the scalar path's float operations in its order, so each equals
        `_price_latent_layers((count, 0))` to the bit (tests/test_engine_price_table.py checks)."""
        kernels = self._kernels
        counts = np.arange(tokens.start, tokens.stop, dtype=np.int64)
        layers = kernels.layer_kernels(counts, 0)
        after_head = kernels.after_head_kernels(counts)
        price = kernels.kernel_seconds_by_tokens
        seconds = np.zeros(len(counts))  # summed in the kernels' order, as the scalar path sums them
        for kernel in layers:
            seconds += price(kernel)
        parts = [np.broadcast_to(price(kernel), counts.shape).tolist() for kernel in after_head]
        return LayerBlock(seconds.tolist(), parts, _launches(layers, after_head))

    def _price_latent_layers(self, key: tuple[int, int]) -> LayersPriced:
        kernels = self._kernels
        tokens, latent_rows = key
        layers = kernels.layer_kernels(tokens, latent_rows)
        after_head = kernels.after_head_kernels(tokens)
        price = kernels.kernel_seconds
        seconds = 0.0  # summed in the kernels' order, as sum() would, by a loop: a miss prices every layer kernel
        for kernel in layers:
            seconds += price(kernel, 0.0)
        return seconds, tuple(price(kernel, 0.0) for kernel in after_head), _launches(layers, after_head)

    def _price_context_free(self, key: ContextFreeKey) -> ContextFreePriced:
        """`ContextFreePriced` of an iteration of `tokens` tokens, `logit_rows` rows sampled, `sequences` sequences
        scheduled and (MLA) `latent_rows` latent rows expanded: its parts from their memos, summed in
        `EngineKernels.context_free_kernels`' order. `_single_query_seconds` (and `_verify_seconds`) adds attention
        to the sum, then the launch gaps, in that order: the float operations of summing every part in one pass."""
        if isinstance(key, int):  # `context_free_key`'s digits
            tokens = key // (CONTEXT_FREE_RADIX * CONTEXT_FREE_RADIX)
            logit_rows = key // CONTEXT_FREE_RADIX % CONTEXT_FREE_RADIX
            sequences = key % CONTEXT_FREE_RADIX
            latent_rows = 0
        else:
            tokens, logit_rows, sequences, latent_rows = key
        kernels = self._kernels
        if self._latent:
            layers, after_head, layer_launches = self._latent_layers_memo[tokens, latent_rows]
        else:
            layers, after_head, layer_launches = self._layers_memo[tokens]
        # One GPU runs no collective: no memo entry a token count for the sums of none.
        collectives, collective_launches = self._collectives_memo[tokens] if self.tp > 1 else (0.0, 0)
        head, head_launches = self._logits_memo[logit_rows]
        seconds = layers
        for part in head:
            seconds += part
        for part in after_head:
            seconds += part
        launches = layer_launches + collective_launches + head_launches + kernels.attention_launches
        busy_until, then = self.overheads.cpu_bounds(tokens, launches, sequences)
        return seconds + collectives, launches * self.overheads.kernel_gap_seconds, busy_until, then

    def _price_collectives(self, tokens: int) -> CollectivesPriced:
        collectives = self._kernels.layer_collectives(tokens)
        return sum(c.count * c.seconds for c in collectives), sum(c.count for c in collectives)

    def _price_logits(self, rows: int) -> LogitsPriced:
        kernels = self._kernels
        logits = kernels.logit_kernels(rows)
        return tuple(kernels.kernel_seconds(kernel, 0.0) for kernel in logits), sum(k.count for k in logits)


class LayerBlock:
    """`LayersPriced` of a block of consecutive token counts kept as columns, `block[i]` the i-th count's, built when
    asked: the layers' seconds, each kernel's after the head, and the launches (the same for every count)."""

    __slots__ = ("seconds", "after_head", "launches")

    def __init__(self, seconds: list[float], after_head: list[list[float]], launches: int):
        self.seconds = seconds
        self.after_head = after_head
        self.launches = launches

    def __len__(self) -> int:
        return len(self.seconds)

    def __getitem__(self, row: int) -> LayersPriced:
        return self.seconds[row], tuple([part[row] for part in self.after_head]), self.launches


def context_free_key(tokens: int, logit_rows: int, sequences: int, latent_rows: int) -> ContextFreeKey:
    """The context-free memo's key of an iteration of these counts: one int while the three counts are each below
    CONTEXT_FREE_RADIX and no latent rows are expanded (every engine but an MLA one), the four as a tuple otherwise."""
    if latent_rows or not packs_context_free_key(tokens, logit_rows, sequences):
        return tokens, logit_rows, sequences, latent_rows
    return packed_context_free_key(tokens, logit_rows, sequences)


def packs_context_free_key(tokens: i64, logit_rows: i64, sequences: i64) -> bool:
    """Whether the counts are each below CONTEXT_FREE_RADIX, so that one int keys them."""
    return tokens < CONTEXT_FREE_RADIX and logit_rows < CONTEXT_FREE_RADIX and sequences < CONTEXT_FREE_RADIX


def packed_context_free_key(tokens: i64, logit_rows: i64, sequences: i64) -> i64:
    """The one-int key of counts that `packs_context_free_key`: their digits in CONTEXT_FREE_RADIX."""
    # In 64-bit machine integers (compiled): the packed key passes 2^31, past which compiled code multiplies tagged
    # ints as Python ints, allocating (a ×4-length step packs tens of thousands of keys).
    key: i64 = tokens
    return (key * CONTEXT_FREE_RADIX + logit_rows) * CONTEXT_FREE_RADIX + sequences


def context_free_cache_index(tokens: i64, logit_rows: i64, sequences: i64) -> i64:
    """Where `ContextFreeCache` keeps the counts' part: a mix of the three under which the shapes a prefill run asks
    in turn (the budget's tokens, the decode batch's rows sampled and scheduled, each one or a few more) land apart."""
    mixed: i64 = sequences * 40503 + logit_rows * 25716 + tokens * 15487  # < 2^37 for counts below the radix
    return mixed & (CONTEXT_FREE_CACHE_SLOTS - 1)


class ContextFreeCache:
    """Context-free parts an engine's cost model priced recently, by packed key (`packed_context_free_key`), in
    front of its memo: direct-mapped columns of machine numbers, each key in one slot (`context_free_cache_index`),
    a newer key taking the slot over. A hit compares an int and reads four floats where the memo's lookup boxes the
    key, hashes it and unpacks a tuple: a ×4-length step prices ~46,000 iterations, ~38,000 of them shapes already
    seen, most of them the few a prefill run asks in turn. Every value is the memo's, copied: which keys the cache
    holds changes how a value is found, never the value."""

    __slots__ = ("keys", "before", "gaps", "busy_until", "then")

    def __init__(self) -> None:
        self.keys = vec[i64]([-1] * CONTEXT_FREE_CACHE_SLOTS)  # no packed key is negative: an empty slot
        self.before = vec[float]([0.0] * CONTEXT_FREE_CACHE_SLOTS)
        self.gaps = vec[float]([0.0] * CONTEXT_FREE_CACHE_SLOTS)
        self.busy_until = vec[float]([0.0] * CONTEXT_FREE_CACHE_SLOTS)
        self.then = vec[float]([0.0] * CONTEXT_FREE_CACHE_SLOTS)

    def __reduce__(self) -> tuple[type[ContextFreeCache], tuple[()]]:
        """Pickled and copied empty (librt's columns do not pickle): what it holds is the memo's, found again on
        first use, so a cost model pickles and deep-copies as it did before the cache."""
        return ContextFreeCache, ()

    def store(self, index: i64, key: i64, before: float, gaps: float, busy_until: float, then: float) -> None:
        self.keys[index] = key
        self.before[index] = before
        self.gaps[index] = gaps
        self.busy_until[index] = busy_until
        self.then[index] = then


def _launches(*kernels: Iterable[Kernel]) -> int:
    """Kernel launches of these kernels (each `count` times)."""
    return sum(kernel.count for group in kernels for kernel in group)


def kv_cache_tokens(
    spec: ModelSpec, gpu_memory_bytes: float, placement: EngineLayout, weight_dtype_bytes: float | None = None
) -> int:
    """KV-cache tokens one engine holds: its HBM share less weights and workspace (as `costs.memory` counts them)."""
    weight_bytes = spec.dtype_bytes if weight_dtype_bytes is None else weight_dtype_bytes
    free = (
        placement.gpu_memory_utilization * gpu_memory_bytes
        - spec.total_params * weight_bytes / placement.tp
        - rollout_workspace_bytes(spec, placement)
    )
    return max(0, int(free // kv_bytes_per_token_per_gpu(spec, placement.tp)))
