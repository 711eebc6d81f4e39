"""The kernels and collectives of one rollout-engine iteration on one GPU, and their roofline time (the model of
`rlsim.costs.rollout`'s notes): the decoder layers' weight GEMMs, memory-bound ops and collectives, the output head
and sampler, and fused attention, each kernel's work affine in the decode batch's total context."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from rlsim.costs.compute import GEMM_FILL_S, GPURates, Tokens, each
from rlsim.costs.iteration_work import SingleQueryAttention, Work
from rlsim.costs.memory import kv_bytes_per_token_per_gpu
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS, GemmShape, LayerKind

if TYPE_CHECKING:
    from rlsim.costs.rollout import EngineOverheads

CollectiveSeconds = Callable[[float], float]
"""Time of one collective over the engine's GPUs, given its size in bytes: for an all-reduce the tensor every GPU
holds and reduces, for an all-to-all the bytes each GPU sends to the group (its own share included)."""


# ---- precisions of what is not a weight -----------------------------------------------------------------------

ACTIVATION_BYTES = 2  # bf16 hidden states and intermediate activations
LOGIT_BYTES = 4  # the sampler works on fp32 logits
# The sampler's passes over the logits of each row after the output head wrote them: softmax reads them and writes the
# probabilities, sampling reads the probabilities.
SAMPLER_LOGIT_PASSES = 3
# Scale factors of quantized activations: one fp32 scale per token and 128-element group of its row (the 1x128 groups
# of vLLM's block-FP8 path, per_token_group_quant_fp8, which verl's FP8 rollout uses), counted as bytes per element.
ACTIVATION_SCALE_BYTES_PER_ELEMENT = 4 / 128



class Kernel(NamedTuple):
    """One kernel launched `count` times per iteration, its work affine in the decode batch's total context c.

    kind: "gemm" runs at the GEMM rate, "attention" at the fused-attention rate, "memory" is bound by HBM alone.
    shape: (m, n, k) of a GEMM, timed by `GPURates.gemm_seconds` (tile and wave quantization); its work does not
    depend on the context.
    """

    name: str
    count: int  # type: ignore[assignment]  # shadows tuple.count, which nothing here calls
    kind: Literal["gemm", "attention", "memory"]
    flops: float = 0.0
    flops_per_context: float = 0.0
    nbytes: float = 0.0
    bytes_per_context: float = 0.0
    shape: tuple[float, float, float] | None = None
    quantized: bool = False  # a weight GEMM whose weights and inputs are quantized (EngineKernels.quantized_rates)


class KernelCollective(NamedTuple):
    name: str
    count: int  # type: ignore[assignment]  # shadows tuple.count, which nothing here calls
    seconds: float


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

# Kernels Hugging Face transformers launches per decoder layer in a decode step of generate() (eager PyTorch, SDPA
# attention, the default DynamicCache), counted op by op from LlamaDecoderLayer and LlamaSdpaAttention
# (src/transformers/models/llama/modeling_llama.py at 002272831f, v4.39; Qwen2's layer is the same, its q/k/v bias
# inside the GEMM). The NCCL all-reduces of a tensor-parallel plan are not in these counts. Attention halves:
# * mha 34: input LlamaRMSNorm 8 (to fp32, pow, mean, +eps, rsqrt, mul, to bf16, ·weight); q, k and v GEMMs 3; the
#   rotary embedding recomputed in every layer 7 (position ids to float, matmul, cat, cos, sin, 2 casts);
#   apply_rotary_pos_emb 10 (for q and k: ·cos, rotate_half's neg and cat, ·sin, add); DynamicCache.update's torch.cat
#   of K and V 2; the causal mask indexed by cache_position 1; scaled_dot_product_attention 1; o_proj 1; residual add 1;
# * gqa 36: repeat_kv copies K and V to every query head, 2 more;
# * gqa_qk_norm 52: Qwen3 also normalises q and k per head, two more RMSNorms of 8.
# MLP half, dense 14: post-attention RMSNorm 8, gate and up GEMMs 2, SiLU 1, the product 1, down GEMM 1, residual add 1.
# The few dozen kernels per step outside the layers (the 4-D mask, position ids, logits processing, stopping criteria)
# are left out: under 3 % of a 7B model's.
HF_EAGER_KERNELS = {"mha": 34, "gqa": 36, "gqa_qk_norm": 52, "dense": 14}



class EngineKernels:
    """The kernels of an iteration of `spec` on one of an engine's `tp` GPUs (experts over `ep` groups), weights of
    `weight_bytes` bytes each, and their times at `rates`; `all_reduce_seconds` and `all_to_all_seconds` price the
    engine's own collectives, `overheads` its CPU side.

    `quantized_rates`: the decoder layers' weights are quantized together with their input activations (W8A8 FP8,
    W4A4 NVFP4): their GEMMs run at these rates (the narrow type's tensor cores), each after a kernel that quantizes
    its input rows, and the output head keeps 16-bit weights (vLLM quantizes the decoder layers' linear layers only).
    None: every weight is `weight_bytes` wide and every GEMM runs at `rates`.
    """

    __slots__ = ("spec", "rates", "tp", "ep", "all_reduce_seconds", "all_to_all_seconds", "overheads", "weight_bytes",
                 "quantized_rates", "head_weight_bytes", "expert_load_imbalance", "lora_rank", "kv_per_layer",
                 "decode_kv_passes", "attention_layers", "attention_launches", "_gemm_shapes", "_attention_widths",
                 "single_query_attention", "_expert_weight_elements", "_split_gemms")

    def __init__(self, spec: ModelSpec, rates: GPURates, tp: int, ep: int,
                 all_reduce_seconds: CollectiveSeconds | None, all_to_all_seconds: CollectiveSeconds | None,
                 overheads: EngineOverheads, weight_bytes: float, quantized_rates: GPURates | None = None,
                 expert_load_imbalance: float = 1.0, lora_rank: int = 0):
        self.spec, self.rates, self.tp, self.ep = spec, rates, tp, ep
        # > 0: the engine serves an unmerged LoRA adapter of this rank on its dense linear layers (rlsim.costs.lora).
        self.lora_rank = lora_rank
        # With experts over ep > 1 groups, the busiest group serves this many times the mean (token, expert)
        # assignments, and every GPU of the engine waits for it at the combine.
        self.expert_load_imbalance = expert_load_imbalance if ep > 1 else 1.0
        self.all_reduce_seconds, self.all_to_all_seconds = all_reduce_seconds, all_to_all_seconds
        self.overheads, self.weight_bytes, self.quantized_rates = overheads, weight_bytes, quantized_rates
        self.head_weight_bytes = float(ACTIVATION_BYTES) if quantized_rates is not None else weight_bytes
        self.kv_per_layer = kv_bytes_per_token_per_gpu(spec, tp) / spec.architecture.num_hidden_layers
        self.decode_kv_passes = _hf_decode_kv_passes(spec, tp) if overheads.engine == "hf" else 1
        # Layers of each kind that has any (dense, then MoE): one attention kernel each per iteration.
        self.attention_layers = tuple(spec.layer_count(kind) for kind in LAYER_KINDS if spec.layer_count(kind))
        self.attention_launches = sum(self.attention_layers)
        # The spec rebuilds its shapes on every call; an engine prices thousands of iterations.
        self._gemm_shapes = {kind: spec.layer_gemm_shapes(kind) for kind in LAYER_KINDS if spec.layer_count(kind)}
        self._split_gemms = {kind: self._split(shapes) for kind, shapes in self._gemm_shapes.items()}
        self._attention_widths = self._widths()
        # The attention price every prefill iteration asks (EngineCosts.chunk_iteration_seconds), from the counts.
        self.single_query_attention = SingleQueryAttention(
            *self._attention_widths, self.decode_kv_passes, self.kv_per_layer, ACTIVATION_BYTES, GEMM_FILL_S,
            rates.attention_roofline, self.attention_layers)
        # Weight elements of one routed expert on this GPU (all its GEMMs, after TP slicing).
        self._expert_weight_elements = sum(
            i * o for name, i, o, _, _ in self.layer_gemms("moe", 1, 0) if name.startswith(_ROUTED_EXPERTS)
        ) if "moe" in self._gemm_shapes else 0.0

    def rates_of(self, kernel: Kernel) -> GPURates:
        """The rates `kernel` runs at: a quantized weight GEMM's narrow tensor cores, else the engine's 16-bit ones."""
        if kernel.quantized and self.quantized_rates is not None:
            return self.quantized_rates
        return self.rates

    def kernel_seconds(self, kernel: Kernel, decode_context: float) -> float:
        """Roofline time of `kernel.count` launches of a kernel at decode context `decode_context`."""
        flops = kernel.flops + kernel.flops_per_context * decode_context
        nbytes = kernel.nbytes + kernel.bytes_per_context * decode_context
        if kernel.kind == "gemm" and kernel.shape is not None:
            seconds = self.rates_of(kernel).gemm_seconds(*kernel.shape, nbytes=nbytes)
        elif kernel.kind == "gemm":
            seconds = self.rates.kernel_seconds(flops, nbytes)
        elif kernel.kind == "attention":
            seconds = self.rates.attention_seconds(flops, nbytes)
        else:
            seconds = self.rates.memory_seconds(nbytes)
        return kernel.count * seconds

    def kernel_seconds_by_tokens(self, kernel: Kernel) -> NDArray[np.float64]:
        """`kernel_seconds(kernel, 0.0)` of a context-free kernel built over an array of token counts (`Tokens`): each
        element to the bit the scalar price of its count's kernel (the same float operations, element by element)."""
        if kernel.kind == "gemm" and kernel.shape is not None:
            seconds = np.asarray(self.rates_of(kernel).gemm_seconds(*kernel.shape, nbytes=kernel.nbytes))
        elif kernel.kind == "memory":
            seconds = self.rates.memory_seconds(np.asarray(kernel.nbytes, dtype=np.float64))
        else:
            raise ValueError(f"{kernel.name}: only shaped GEMMs and memory-bound kernels are priced by token count")
        return kernel.count * seconds

    def kernels(self, work: Work) -> tuple[list[Kernel], list[KernelCollective]]:
        """Kernels and collectives of one iteration on one GPU, their costs affine in the decode context."""
        kernels, collectives = self.context_free_kernels(work.tokens, work.logit_rows, self.latent_rows(work))
        return [*self.attention_kernels(work), *kernels], collectives

    def latent_rows(self, work: Work) -> int:
        """Rows of MLA's kv_b_proj: prefill expands the cached latents of its sequences too (0 without MLA)."""
        return work.decode_rows + work.prefill + work.prefill_cached if self.spec.architecture.mla is not None else 0

    def attention_kernels(self, work: Work) -> list[Kernel]:
        return [self._attention_kernel(work, self.kv_per_layer, layers) for layers in self.attention_layers]

    def context_free_kernels(
        self, tokens: int, logit_rows: int, latent_rows: int
    ) -> tuple[list[Kernel], list[KernelCollective]]:
        """Every kernel and collective of an iteration but attention: functions of the tokens in it, the rows whose
        logits are sampled and (MLA) the latent rows kv_b_proj expands."""
        kernels = [*self.layer_kernels(tokens, latent_rows), *self.logit_kernels(logit_rows),
                   *self.after_head_kernels(tokens)]
        return kernels, self.layer_collectives(tokens)

    def layer_collectives(self, tokens: int) -> list[KernelCollective]:
        """The decoder layers' collectives for an iteration of `tokens` tokens (one count: a collective is priced by a
        scalar function of its bytes)."""
        spec = self.spec
        if self.tp == 1:
            return []  # asked for every token count a run prices
        return [c for kind in LAYER_KINDS if spec.layer_count(kind)
                for c in self._layer_collectives(kind, tokens, spec.layer_count(kind))]

    def layer_kernels(self, tokens: Tokens, latent_rows: Tokens) -> list[Kernel]:
        """The decoder layers' kernels but attention for an iteration of `tokens` tokens (or, element by element, for
        an array of token counts: `Tokens`)."""
        spec, act, kv_per_layer = self.spec, ACTIVATION_BYTES, self.kv_per_layer
        kernels: list[Kernel] = []
        for kind in LAYER_KINDS:
            layers = spec.layer_count(kind)
            if not layers:
                continue
            first = len(kernels)
            quantized = self.quantized_rates is not None
            input_quant: list[Kernel] = []
            for name, in_features, out_features, rows, weights in self.layer_gemms(kind, tokens, latent_rows):
                flops = 2.0 * rows * in_features * out_features
                nbytes = weights * self.weight_bytes + act * rows * (in_features + out_features)
                if name.startswith(_ROUTED_EXPERTS):
                    nbytes += self._expert_fixed_bytes(in_features * out_features, weights)
                if quantized:
                    # The GEMM reads its quantized input (and scales) in place of the 16-bit rows; a kernel before it
                    # reads the rows and writes them quantized (vLLM's dynamic per-token(-group) activation quant).
                    quantized_input = rows * in_features * (self.weight_bytes + ACTIVATION_SCALE_BYTES_PER_ELEMENT)
                    nbytes += quantized_input - act * rows * in_features
                    input_quant.append(Kernel(f"{name}.input_quant", layers, "memory",
                                              nbytes=act * rows * in_features + quantized_input))
                kernels.append(Kernel(name, layers, "gemm", flops, 0.0, nbytes, shape=(rows, out_features, in_features),
                                      quantized=quantized))
                if self.lora_rank and not name.startswith(_ROUTED_EXPERTS):
                    kernels.extend(self._adapter_kernels(name, layers, rows, in_features, out_features))
            kernels.extend(self._elementwise_kernels(kind, tokens, kv_per_layer, layers))
            if self.overheads.launches_op_by_op:
                # The layer's priced kernels, and its attention kernel (priced apart), stand for that many of the
                # kernels eager vLLM launches; the rest are small ops, each a launch and a kernel's fixed cost.
                priced = sum(k.count for k in kernels[first:]) // layers + 1
                unpriced = self._eager_kernels_per_layer(kind) - priced
                if unpriced > 0:
                    kernels.append(Kernel("eager_small_ops", unpriced * layers, "memory"))
            # Kernels the 16-bit layer does not launch, beyond the eager counts above.
            kernels.extend(input_quant)
        return kernels

    def _adapter_kernels(self, name: str, layers: int, rows: float, in_features: float,
                         out_features: float) -> list[Kernel]:
        """vLLM's LoRA kernels beside a layer GEMM: shrink (x·A, rank columns) and expand (·B, added to the output),
        16-bit, each reading its adapter matrix and its rows."""
        rank, act = self.lora_rank, ACTIVATION_BYTES
        shrink = act * (rows * in_features + in_features * rank + rows * rank)
        expand = act * (rows * rank + rank * out_features + 2 * rows * out_features)  # reads and adds to the output
        return [Kernel(f"{name}.lora_shrink", layers, "gemm", 2.0 * rows * in_features * rank, 0.0, shrink,
                       shape=(rows, rank, in_features)),
                Kernel(f"{name}.lora_expand", layers, "gemm", 2.0 * rows * rank * out_features, 0.0, expand,
                       shape=(rows, out_features, rank))]

    def logit_kernels(self, rows: int) -> list[Kernel]:
        """The output head (vocabulary split over tp) for the `rows` rows that are sampled, then the sampler on their
        full-vocabulary logits."""
        if not rows:
            return []
        arch, act = self.spec.architecture, ACTIVATION_BYTES
        hidden, vocab = arch.hidden_size, arch.vocab_size
        head_weights = hidden * vocab / self.tp
        flops = 2.0 * rows * head_weights
        nbytes = head_weights * self.head_weight_bytes + act * rows * (hidden + vocab / self.tp)
        return [Kernel("lm_head", 1, "gemm", flops, 0.0, nbytes, shape=(rows, vocab / self.tp, hidden)),
                Kernel("sampler", 1, "memory", nbytes=SAMPLER_LOGIT_PASSES * LOGIT_BYTES * rows * vocab)]

    def after_head_kernels(self, tokens: Tokens) -> list[Kernel]:
        """The embedding lookup and the final norm, for every token (listed after the head, as they are summed)."""
        nbytes = 2 * ACTIVATION_BYTES * tokens * self.spec.architecture.hidden_size
        return [Kernel("embedding", 1, "memory", nbytes=nbytes), Kernel("final_norm", 1, "memory", nbytes=nbytes)]

    def _expert_fixed_bytes(self, per_expert: float, weights: float) -> float:
        """The fused-MoE kernel's fixed times (`GPURates.moe_call_seconds` per call, `moe_expert_seconds` per expert
        touched) as the bytes the stream would move meanwhile, shared between the kernel's GEMMs by their weights:
        `per_expert` is one GEMM's weight elements for one expert, `weights` over the experts it touches."""
        rates = self.rates
        share = per_expert / self._expert_weight_elements
        experts_touched = weights / per_expert
        return share * (rates.moe_call_seconds + experts_touched * rates.moe_expert_seconds) * rates.hbm_bytes_per_s

    def _eager_kernels_per_layer(self, kind: str) -> int:
        """Kernels eager vLLM launches for one layer of `kind` in a decode step (`VLLM_EAGER_KERNELS`): its attention
        half by attention type, its MLP half dense or MoE (for MLA models, the MoE block of vLLM's DeepSeek class);
        HF generate()'s (`HF_EAGER_KERNELS`) for dense models."""
        arch = self.spec.architecture
        if self.overheads.engine == "hf":
            if kind != "dense" or arch.mla is not None:
                raise ValueError(f"{self.spec.name}: the HF generate() engine is modelled for dense models only")
            grouped = arch.num_key_value_heads < arch.num_attention_heads
            return HF_EAGER_KERNELS["gqa_qk_norm" if arch.qk_norm else "gqa" if grouped else "mha"] + HF_EAGER_KERNELS["dense"]
        attention = "mla" if arch.mla is not None else "gqa_qk_norm" if arch.qk_norm else "gqa"
        mlp = "dense" if kind == "dense" else "moe_mla" if arch.mla is not None else "moe"
        return VLLM_EAGER_KERNELS[attention] + VLLM_EAGER_KERNELS[mlp]

    def layer_gemms(self, kind: LayerKind, tokens: Tokens,
                    latent_rows: Tokens) -> list[tuple[str, float, float, float, float]]:
        """(name, in_features, out_features, rows M, weight elements read) per fused GEMM of one layer on one GPU (rows
        and weights arrays when `tokens` is: `Tokens`)."""
        fused: dict[str, list[float]] = {}  # name -> [in_features, out_features, rows, weight elements]
        touched = None
        for group, in_features, out_features, rows_of, weights, active in self._split_gemms[kind]:
            if rows_of == "experts":
                if touched is None:
                    touched = self._experts_touched(tokens)
                weights = in_features * out_features * touched / self.ep
                # (token, expert) assignments the busiest GPU's experts serve.
                rows = tokens * active / self.ep * self.expert_load_imbalance
            else:
                rows = _as_float(latent_rows if rows_of == "latent" else tokens)
            entry = fused.get(group)
            if entry is None:
                fused[group] = [in_features, out_features, rows, weights]
            else:
                entry[1] += out_features
                entry[3] += weights
        return [(name, i, o, m, w) for name, (i, o, m, w) in fused.items()]

    def _experts_touched(self, tokens: Tokens) -> Tokens:
        """`MoE.experts_touched` of the tokens (count by count for an array: its power is Python's)."""
        moe = self.spec.architecture.moe
        assert moe is not None
        return each(moe.experts_touched, tokens)

    def _split(self, shapes: tuple[GemmShape, ...]) -> tuple[tuple[str, float, float, str, float, int], ...]:
        """Per weight matrix of a layer, what of its GEMM on one GPU does not depend on the iteration: (fused kernel,
        in_features, out_features after the split over the engine's GPUs, what its rows are — "tokens", "latent" or
        "experts" —, weight elements read unless routed, tokens' active experts). `layer_gemms` reads it at every
        iteration priced, so the splits are worked out once."""
        arch, tp, ep = self.spec.architecture, self.tp, self.ep
        out = []
        for shape in shapes:
            split = _SPLIT.get(shape.name)
            if split is None:
                raise ValueError(f"no tensor-parallel layout is known for weight {shape.name!r}")
            in_features, out_features = float(shape.in_features), float(shape.out_features)
            if split == "column":
                # K and V heads split until each GPU holds one, then are replicated.
                ways = min(tp, arch.num_key_value_heads) if shape.name in ("self_attn.k_proj", "self_attn.v_proj") else tp
                out_features /= ways
            elif split == "row":
                in_features /= tp
            # Decode multiplies the queries by kv_b_proj (MLA's absorbed form); prefill expands the cached latents of
            # its sequences as well as the new ones (vLLM's MLA prefill path).
            rows_of = "latent" if shape.name == "self_attn.kv_b_proj" else "tokens"
            if split == "experts":
                slices = tp // ep  # GPUs sharing each expert
                if shape.name.endswith("down_proj"):
                    in_features /= slices
                else:
                    out_features /= slices
                rows_of = "experts"
            out.append((_FUSED.get(shape.name, shape.name), in_features, out_features, rows_of,
                        in_features * out_features, shape.active))
        return tuple(out)

    def _widths(self) -> tuple[float, float, float]:
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

    def attention_seconds(self, work: Work, decode_context: float) -> float:
        """The attention kernels' time in an iteration at `decode_context`: one layer's kernel priced once, times the
        layers of each kind (`_attention_kernels` builds one kernel per kind; every iteration asks for this)."""
        # `kernel_seconds` of the one launch, without building the kernel or dispatching on its kind.
        flops, flops_per_context, nbytes, bytes_per_context = self._attention_work(work, self.kv_per_layer)
        seconds = self.rates.attention_seconds(flops + flops_per_context * decode_context,
                                               nbytes + bytes_per_context * decode_context)
        total = 0.0
        for layers in self.attention_layers:
            total += layers * seconds
        return total

    def _attention_kernel(self, work: Work, kv_per_layer: float, layers: int) -> Kernel:
        """Fused attention of one layer on one GPU: KV reads of every key attended, FLOPs per (query, key) pair."""
        return Kernel("attention", layers, "attention", *self._attention_work(work, kv_per_layer))

    def _attention_work(self, work: Work, kv_per_layer: float) -> tuple[float, float, float, float]:
        """(FLOPs, FLOPs per context token, bytes, bytes per context token) of one layer's fused attention."""
        expanded, absorbed, query_width = self._attention_widths
        # Plus the context c: each sequence also attends to the tokens it decodes; a verify step's queries each see
        # the whole cache, which the kernel reads once for all of them.
        decode_keys, decode_queries = work.decode_rows, work.decode_queries
        flops = absorbed * decode_keys * decode_queries + expanded * work.prefill_pairs
        passes = self.decode_kv_passes
        keys_read = passes * decode_keys + work.prefill + work.prefill_cached
        nbytes = kv_per_layer * keys_read + ACTIVATION_BYTES * work.tokens * query_width
        return flops, absorbed * decode_queries, nbytes, passes * kv_per_layer

    def _elementwise_kernels(self, kind: str, tokens: int, kv_per_layer: float, layers: int) -> list[Kernel]:
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
            Kernel("norms", 2 * layers, "memory", nbytes=4 * act * tokens * hidden),
            # RoPE reads and writes the queries and keys; the cache write reads K and V and stores them.
            Kernel("rope_kv_write", layers, "memory", nbytes=tokens * (2 * act * rope_width + 2 * kv_per_layer)),
        ]
        if kind == "dense":
            width = arch.intermediate_size / tp
            kernels.append(Kernel("activation", layers, "memory", nbytes=3 * act * tokens * width))
            return kernels
        moe = arch.moe
        assert moe is not None
        # SwiGLU reads gate and up and writes their product, for every (token, expert) assignment.
        imbalance = self.expert_load_imbalance
        width = (moe.num_experts_per_tok * moe.moe_intermediate_size * imbalance
                 + moe.n_shared_experts * moe.moe_intermediate_size)
        kernels.append(Kernel("activation", layers, "memory", nbytes=3 * act * tokens * width / tp))
        # Top-k over fp32 router logits, then gathering tokens for their experts and summing the k outputs back.
        routing = tokens * (LOGIT_BYTES * moe.num_experts + 2 * act * moe.num_experts_per_tok * hidden / self.ep * imbalance)
        kernels.append(Kernel("moe_routing", layers, "memory", nbytes=routing))
        return kernels

    def _layer_collectives(self, kind: str, tokens: int, layers: int) -> list[KernelCollective]:
        """TP all-reduces after attention and after the FFN; an EP layer dispatches and combines by all-to-all."""
        if self.tp == 1:
            return []
        assert self.all_reduce_seconds is not None
        hidden_bytes = ACTIVATION_BYTES * tokens * self.spec.architecture.hidden_size
        all_reduce = self.all_reduce_seconds(hidden_bytes)
        if kind == "moe" and self.ep > 1:
            assert self.all_to_all_seconds is not None and self.spec.architecture.moe is not None
            # Each GPU dispatches its 1/tp share of the tokens to the k experts each is routed to, and gets them back;
            # the busiest GPU receives and returns its imbalance's multiple of the mean.
            share = hidden_bytes / self.tp * self.spec.architecture.moe.num_experts_per_tok * self.expert_load_imbalance
            return [
                KernelCollective("all_reduce", layers, all_reduce),
                KernelCollective("all_to_all", 2 * layers, self.all_to_all_seconds(share)),
            ]
        return [KernelCollective("all_reduce", 2 * layers, all_reduce)]

    # ---- the closed form ----------------------------------------------------------------------------------------



def _hf_decode_kv_passes(spec: ModelSpec, tp: int) -> int:
    """Passes over a decoding sequence's cached K and V that one layer of HF generate() makes per step, where a paged
    engine's fused attention makes one: DynamicCache.update's torch.cat reads the cache and writes it anew one token
    longer, and scaled_dot_product_attention reads K and V once per query head of a KV head, after repeat_kv has
    copied them out that many times (modeling_llama.py and cache_utils.py at v4.39; `HF_EAGER_KERNELS`)."""
    arch = spec.architecture
    kv_heads = max(1.0, arch.num_key_value_heads / tp)  # split until each GPU holds one, as EngineKernels splits them
    repeats = round(arch.num_attention_heads / tp / kv_heads)
    return 2 + repeats + (1 + repeats if repeats > 1 else 0)


def _as_float(rows: Tokens) -> Tokens:
    """Rows of a GEMM as floats: a count, or an array of counts."""
    return rows.astype(np.float64) if isinstance(rows, np.ndarray) else float(rows)
