"""What one layer (and the output head) of a training micro-batch costs on one GPU: GEMMs, attention, memory-bound
elementwise work and the TP/CP/EP communication on the critical path (the model of `rlsim.costs.training`'s notes).

A micro-batch enters these prices only through its tokens on this GPU and its attention's causal (query, key) pairs,
so they take those two numbers, not the sequence lengths. The parts that depend on the tokens alone (a layer's GEMMs
and elementwise work, the head) are remembered per token count. Every price also takes numpy arrays of token counts
and pairs (the micro-batches of a whole pass, `TrainingCosts.price_ahead`): the scalar formulas element by element, so
with the same result to the bit."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from rlsim.costs.collectives import Op
from rlsim.costs.compute import GPURates, Tokens, each
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memo import Memo
from rlsim.costs.memory import kernel_implementation
from rlsim.costs.training_groups import Collective, GroupCollectives
from rlsim.costs.training_time import LayerTime
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS, LayerKind

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
# FP8 training (TrainingLayout.precision): Transformer Engine's GEMMs take FP8 inputs, cast by memory-bound kernels,
# bytes per element: the forward pass casts its input activations (read 2, write 1); the backward pass casts and
# transposes the output gradient (read 2, write 1 + 1) and the weight gradient reads the saved FP8 input transposed
# (read 1, write 1). FP8 copies of the weights are made once per optimizer step and kept over its micro-batches: left
# out. The GEMMs read 1-byte inputs and write 16-bit outputs.
FP8_CAST_BYTES = {"input": 3, "output_gradient": 4, "input_transpose": 2}
FP8_OPERAND_BYTES = 1
# MoE token permutation: each of a token's top-k copies is read and written once on dispatch and once on combine (bf16).
MOE_PERMUTE_BYTES = 8
# The backward pass of an elementwise op reads the output gradient and the op's saved inputs and writes the input
# gradients: 1.5× (unary) to 1.7× (binary) the forward's traffic, plus gradient accumulation into the residual stream.
ELEMENTWISE_BACKWARD_TRAFFIC = 2.0
# Bytes moved per logit (one token × one vocabulary entry of this GPU's shard) to turn the bf16 logits into
# log-probabilities, (forward, backward), by `TrainingLayout.logprob_kernel`, counted from each implementation:
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

# Per-token layer prices remembered per kind of layer (keyed by the micro-batch's tokens, which differ step after
# step): bounded, so a long run's memory does not grow with its steps.
TOKEN_MEMO_LIMIT = 16_384
# Micro-batches below which `TrainingCosts.price_ahead` leaves them to the scalar path: numpy's fixed cost per
# operation makes an array of a few dearer than pricing them one by one (about 20 break even on an H100 dense model).
PRICE_AHEAD_MIN_COUNTS = 32


def causal_pairs(sequence_lengths: Sequence[int]) -> float:
    """(query, key) pairs of causal attention within each sequence, summed in order."""
    return sum(n * (n + 1) / 2 for n in sequence_lengths)


def positive_part(seconds: Tokens) -> Tokens:
    """max(0, seconds): of a number, or of every element of an array (what is exposed beyond an overlap)."""
    if isinstance(seconds, np.ndarray):
        return np.maximum(seconds, 0.0)
    return max(0.0, seconds)


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



class LayerPricing:
    """Per-layer prices of `spec` on GPUs with `rates`, laid out as `layout`; `head` as in `TrainingCosts`."""

    __slots__ = ("spec", "rates", "layout", "collectives", "head", "_implementation", "_widths", "_gemm_plan",
                 "_elementwise_bytes", "_attention_flops_per_pair", "_attention_efficiency", "_token_memo", "_head_memo",
                 "_fp8")

    def __init__(self, spec: ModelSpec, rates: GPURates, layout: TrainingLayout, collectives: GroupCollectives,
                 head: Literal["lm", "value"]):
        self.spec, self.rates, self.layout, self.collectives, self.head = spec, rates, layout, collectives, head
        self._implementation = kernel_implementation(layout.backend)
        # The decoder layers' GEMMs in FP8 (None: in the rates' own 16-bit type).
        self._fp8 = rates.in_fp8() if layout.precision == "fp8" else None
        self._widths = self._attention_widths()
        kinds = [kind for kind in LAYER_KINDS if spec.layer_count(kind)]
        self._gemm_plan = {kind: self._plan_gemms(spec.layer_gemm_shapes(kind)) for kind in kinds}
        # Forward bytes per token of each memory-bound op, by layer kind: every layer of every micro-batch asks.
        self._elementwise_bytes = {kind: self._elementwise_bytes_of(kind) for kind in kinds}
        self._attention_flops_per_pair = spec.attention_flops_per_context_token / spec.architecture.num_hidden_layers
        self._attention_efficiency = ATTENTION_EFFICIENCY["megatron" if layout.backend == "megatron" else "fsdp"]
        # (layer kind, tokens, backward) -> (GEMM, elementwise) seconds: micro-batches of equal token counts repeat
        # across DP ranks and passes, and neither depends on how the tokens split into sequences.
        self._token_memo: Memo[tuple[LayerKind, float, bool], tuple[float, float]] = Memo(
            self._price_per_token, limit=TOKEN_MEMO_LIMIT)
        # (tokens, backward) -> the head's `LayerTime` (shared, never changed): the last stage asks twice per micro-batch.
        self._head_memo: Memo[tuple[float, bool], LayerTime] = Memo(self._price_head, limit=TOKEN_MEMO_LIMIT)

    def tokens(self, sequence_lengths: Sequence[int], pad_to: int = 0) -> float:
        """Tokens of the micro-batch on this GPU's TP group (CP splits every sequence), padded up to `pad_to`."""
        return max(sum(sequence_lengths), pad_to) / self.layout.cp

    # ---- one layer ----------------------------------------------------------------------------------------------

    def layer(self, kind: LayerKind, tokens: Tokens, pairs: Tokens, *, backward: bool) -> LayerTime:
        """One layer's forward or backward pass (input and weight gradients, recompute excluded) over `tokens` tokens
        whose attention spans `pairs` causal pairs (the padding of a padded micro-batch is in the tokens only); of
        numbers, or of arrays of them, element by element."""
        if isinstance(tokens, np.ndarray):
            gemm = self._price_gemms(kind, tokens, backward=backward)
            elementwise = self._elementwise_seconds(kind, tokens, backward=backward)
        else:
            gemm, elementwise = self._token_memo[kind, tokens, backward]
        attention = self.attention_seconds(pairs, backward=backward)
        collective = self._layer_collectives(kind, tokens, attention, backward=backward)
        return LayerTime(gemm, attention, elementwise, collective)

    def recompute(self, kind: LayerKind, tokens: Tokens, pairs: Tokens, forward: LayerTime | None = None) -> LayerTime:
        """What activation recompute re-runs for one layer during the backward pass; `forward`: the layer's forward
        time over the same micro-batch, when already priced."""
        mode = self.layout.activation_recompute
        if mode == "full":
            return forward if forward is not None else self.layer(kind, tokens, pairs, backward=False)
        if mode == "selective":
            return LayerTime(attention=self.attention_seconds(pairs, backward=False))
        return LayerTime()

    def _price_per_token(self, key: tuple[LayerKind, float, bool]) -> tuple[float, float]:
        kind, tokens, backward = key
        return (self._price_gemms(kind, tokens, backward=backward),
                self._elementwise_seconds(kind, tokens, backward=backward))

    def _price_gemms(self, kind: LayerKind, tokens: Tokens, *, backward: bool) -> float:
        rates = self.rates
        experts, gemms = self._gemm_plan[kind]
        seconds = 0.0
        if experts:
            moe = self.spec.architecture.moe
            assert moe is not None
            # Sequence parallelism: the MoE block sees this GPU's share of the tokens.
            assignments = tokens / self.layout.tp * moe.num_experts_per_tok
            touched = each(moe.experts_touched, tokens / self.layout.tp) / self.layout.ep
            # Backward: the input gradient and, unless the weights are frozen under LoRA, the weight gradient.
            passes = 1 if not backward or self.layout.lora_rank else 2
            for k, n in experts:
                flops = 2.0 * assignments * k * n
                if self.layout.lora_rank:
                    seconds += self._expert_adapter_seconds(assignments, k, n, backward=backward)
                if self._fp8 is None:
                    nbytes = ACTIVATION_BYTES * (assignments * k + touched * k * n + assignments * n)
                    seconds += passes * rates.kernel_seconds(flops, nbytes)
                else:
                    operands = FP8_OPERAND_BYTES * (assignments * k + touched * k * n)
                    nbytes = operands + ACTIVATION_BYTES * assignments * n
                    seconds += passes * self._fp8.kernel_seconds(flops, nbytes)
                    seconds += self._fp8_casts(assignments, k, n, backward=backward)
        if self.layout.lora_rank:
            seconds += self._adapter_seconds(gemms, tokens, backward=backward)
        if self._fp8 is not None:
            return seconds + self._price_fp8_gemms(gemms, tokens, backward=backward)
        for rows_divisor, k, n in gemms:
            m = tokens / rows_divisor
            if backward and self.layout.lora_rank:
                seconds += rates.gemm_seconds(m, k, n)  # frozen weights: the input gradient only
            elif backward:
                seconds += rates.gemm_seconds(m, k, n) + rates.gemm_seconds(k, n, m)
            else:
                seconds += rates.gemm_seconds(m, n, k)
        return seconds

    def _adapter_seconds(self, gemms: tuple[tuple[float, float, float], ...], tokens: float, *,
                         backward: bool) -> float:
        """LoRA adapters beside every GEMM (rlsim.costs.lora): forward x·A then ·B; backward the input gradients
        through B and A and the weight gradients of both. 16-bit, whatever the base GEMMs run in."""
        rates, rank, seconds = self.rates, self.layout.lora_rank, 0.0
        for rows_divisor, k, n in gemms:
            m = tokens / rows_divisor
            if backward:
                seconds += (rates.gemm_seconds(m, rank, n) + rates.gemm_seconds(rank, n, m)
                            + rates.gemm_seconds(m, k, rank) + rates.gemm_seconds(k, rank, m))
            else:
                seconds += rates.gemm_seconds(m, rank, k) + rates.gemm_seconds(m, n, rank)
        return seconds

    def _expert_adapter_seconds(self, assignments: float, k: float, n: float, *, backward: bool) -> float:
        """LoRA adapters of the routed experts, grouped like the experts' GEMMs: 2·r·(k + n) FLOPs per assignment
        forward, twice that backward."""
        flops = 2.0 * assignments * self.layout.lora_rank * (k + n) * (2 if backward else 1)
        nbytes = ACTIVATION_BYTES * assignments * (k + n) * (2 if backward else 1)
        return self.rates.kernel_seconds(flops, nbytes)

    def _price_fp8_gemms(self, gemms: tuple[tuple[float, float, float], ...], tokens: float, *,
                         backward: bool) -> float:
        """The dense GEMMs in FP8: 1-byte operands, 16-bit outputs, and the casts that feed them (FP8_CAST_BYTES)."""
        fp8 = self._fp8
        assert fp8 is not None

        def gemm(m: float, n: float, k: float) -> float:
            return fp8.gemm_seconds(m, n, k, nbytes=FP8_OPERAND_BYTES * (m * k + k * n) + ACTIVATION_BYTES * m * n)

        seconds = 0.0
        for rows_divisor, k, n in gemms:
            m = tokens / rows_divisor
            if backward:
                seconds += gemm(m, k, n) + (0.0 if self.layout.lora_rank else gemm(k, n, m))
            else:
                seconds += gemm(m, n, k)
            seconds += self._fp8_casts(m, k, n, backward=backward)
        return seconds

    def _fp8_casts(self, rows: float, k: float, n: float, *, backward: bool) -> float:
        """Memory-bound casts feeding an FP8 GEMM of `rows` rows, K = k, N = n (FP8_CAST_BYTES)."""
        if backward:
            return (self.rates.memory_seconds(FP8_CAST_BYTES["output_gradient"] * rows * n)
                    + self.rates.memory_seconds(FP8_CAST_BYTES["input_transpose"] * rows * k))
        return self.rates.memory_seconds(FP8_CAST_BYTES["input"] * rows * k)

    def _plan_gemms(self, shapes: tuple) -> tuple[tuple[tuple[float, float], ...], tuple[tuple[float, float, float], ...]]:
        """The GEMMs one GPU runs in a layer of these shapes, split by this layout once: routed experts as (K, N), and
        every other GEMM as (divisor of the token count giving its rows M, K, N) after TP splitting and Megatron's
        fusion."""
        arch, tp = self.spec.architecture, self.layout.tp
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
        return tuple(experts), tuple((d, k, n) for _, d, k, n in local)

    def attention_seconds(self, pairs: Tokens, *, backward: bool) -> Tokens:
        """One layer's attention over `pairs` causal pairs: FLOPs split by TP (heads) and CP (tokens)."""
        forward_eff, backward_eff = self._attention_efficiency
        flops = self._attention_flops_per_pair * pairs / (self.layout.tp * self.layout.cp)
        if backward:
            return self.rates.compute_seconds(ATTENTION_BACKWARD_FLOPS * flops / backward_eff)
        return self.rates.compute_seconds(flops / forward_eff)

    def _attention_widths(self) -> tuple[int, int, int, int]:
        """Query, key, value and attention-output widths of a layer (all heads)."""
        arch = self.spec.architecture
        if arch.mla is not None:
            qk = arch.num_attention_heads * (arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim)
            v = arch.num_attention_heads * arch.mla.v_head_dim
            return qk, qk, v, v
        q = arch.num_attention_heads * arch.attention_head_dim
        kv = arch.num_key_value_heads * arch.attention_head_dim
        return q, kv, kv, q

    def _elementwise_bytes_of(self, kind: LayerKind) -> dict[str, float]:
        """Forward bytes per token of each memory-bound op of one layer, before the TP split."""
        arch = self.spec.architecture
        per = ELEMENTWISE_BYTES[self._implementation]
        h = arch.hidden_size
        q, k, _, _ = self._widths
        if arch.mla is not None:
            rope = (arch.num_attention_heads + 1) * arch.mla.qk_rope_head_dim  # RoPE touches only the rope dims
        else:
            rope = q + k
        out: dict[str, float] = {"rmsnorm": per["rmsnorm"] * (2 * h + (q + k if arch.qk_norm else 0)),
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

    def _elementwise_seconds(self, kind: LayerKind, tokens: Tokens, *, backward: bool) -> float:
        scale = (ELEMENTWISE_BACKWARD_TRAFFIC if backward else 1.0) * tokens / self.layout.tp
        return sum(self.rates.memory_seconds(scale * b) for b in self._elementwise_bytes[kind].values())

    def _layer_collectives(self, kind: LayerKind, tokens: Tokens, attention_seconds: Tokens, *,
                           backward: bool) -> Tokens:
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
            seconds += pairs * (_over(c.tp, "all_gather", activation) + _over(c.tp, "reduce_scatter", activation))
        if moe and layout.ep > 1:
            assert c.ep is not None and arch.moe is not None
            routed = ACTIVATION_BYTES * tokens / layout.tp * arch.moe.num_experts_per_tok * h
            seconds += 2 * _over(c.ep, "all_to_all", routed)
        if layout.cp > 1:
            assert c.cp is not None
            q, k, v, out = self._widths
            if layout.backend == "megatron":
                # Ring attention: cp−1 exchanges of a K/V block (backward: K/V and their gradients), each hidden behind
                # the attention of one block.
                block_bytes = ACTIVATION_BYTES * tokens * (k + v) / layout.tp * (2 if backward else 1)
                block = _over(c.cp, "send_recv", block_bytes)
                seconds += (layout.cp - 1) * positive_part(block - attention_seconds / layout.cp)
            else:
                # Ulysses: all-to-all Q/K/V from sequence-split to head-split, and the output back.
                seconds += _over(c.cp, "all_to_all", ACTIVATION_BYTES * tokens * (q + k + v) / layout.tp)
                seconds += _over(c.cp, "all_to_all", ACTIVATION_BYTES * tokens * out / layout.tp)
        return seconds

    # ---- output head and pipeline messages ----------------------------------------------------------------------

    def head_time(self, tokens: Tokens, *, backward: bool) -> LayerTime:
        """Final norm, output head and (for "lm") log-softmax over the vocabulary, on the last pipeline stage (of a
        token count, or of an array of them)."""
        if isinstance(tokens, np.ndarray):
            return self._price_head((tokens, backward))
        return self._head_memo[tokens, backward]

    def _price_head(self, key: tuple[Tokens, bool]) -> LayerTime:
        tokens, backward = key
        gemm, elementwise, collective = self._head_parts(tokens, backward=backward)
        return LayerTime(gemm=gemm, elementwise=elementwise, collective=collective)

    def _head_parts(self, tokens: Tokens, *, backward: bool) -> tuple[float, float, float]:
        """The head's (GEMM, elementwise, collective) seconds over `tokens` tokens (each of an array of counts)."""
        arch, tp, rates = self.spec.architecture, self.layout.tp, self.rates
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
            group = self.collectives.tp
            assert group is not None
            collective = each(lambda nbytes: group("reduce_scatter" if backward else "all_gather", nbytes),
                              ACTIVATION_BYTES * tokens * h)
        return gemm, elementwise, collective

    def send(self, tokens: Tokens) -> Tokens:
        """Point-to-point transfer of a micro-batch's activations (or their gradients) to the neighbouring stage."""
        if self.layout.pp == 1:
            return 0.0
        assert self.collectives.pp is not None
        nbytes = ACTIVATION_BYTES * tokens * self.spec.architecture.hidden_size / self.layout.tp
        return _over(self.collectives.pp, "send_recv", nbytes)


def _over(collective: Collective, op: Op, nbytes: Tokens) -> Tokens:
    """A collective's seconds for `nbytes`, or for each element of an array of sizes (it prices numbers only)."""
    if isinstance(nbytes, np.ndarray):
        return each(lambda size: collective(op, size), nbytes)
    return collective(op, nbytes)
