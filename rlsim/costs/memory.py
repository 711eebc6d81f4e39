"""Per-GPU memory of each role: model state, activations, logits, and the KV cache left for rollout.

**Model state** (Rajbhandari et al., arXiv 1910.02054 §3.1 and §5): mixed-precision Adam keeps 2 bytes of bf16 weights,
2 of bf16 gradients and 12 of fp32 master weights, momentum and variance per parameter Ψ. ZeRO-1 shards the 12 over the
N_d ranks that hold the same parameters, ZeRO-2 the gradients too, ZeRO-3 (FSDP full shard) the weights too:
16Ψ, 4Ψ + 12Ψ/N_d, 2Ψ + 14Ψ/N_d, 16Ψ/N_d (`model_state_bytes`). Megatron keeps its gradient buffer in fp32 for bf16
training (megatron/training/arguments.py: "accumulate and all-reduce gradients in fp32 for bfloat16 data type"), so its
gradients take 4 bytes. Dense weights split over tp·pp and are ZeRO-sharded over dp·cp; routed experts follow Megatron-Core's
MoE parallel folding (expert tensor parallelism 1, experts split over ep·pp, ZeRO-sharded over the tp·cp·dp/ep ranks of
the expert-data-parallel group), which is what the config check "ep divides tp·cp·dp" describes.

**Activations** (`activation_bytes_per_token`) are re-derived for SwiGLU + GQA/MLA + RMSNorm layers with the method of
Korthikanti et al. (arXiv 2205.05198 §4.1): count, per token of one layer, every tensor an operation keeps for its
backward pass, bf16 = 2 bytes, a tensor shared by two operations once. With hidden size h, query width q = heads·d_head,
key/value widths k = v = kv_heads·d_head, a heads and FFN width f:

    attention:  RMSNorm input 2h, QKV-projection input 2h, Q/K/V after RoPE (FlashAttention's inputs) 2(q+k+v),
                attention output (FlashAttention keeps it; it is also the o_proj input) 2q, log-sum-exp 4a (fp32)
    MLP:        RMSNorm input 2h, gate/up input 2h, SwiGLU inputs 4f (gate and up outputs) — the eager Hugging Face
                implementation also keeps silu(gate), 2f more — and the down-projection input 2f

giving 8h + 2(q+k+v) + 2q + 4a + 6f bytes (fused kernels, Megatron/TransformerEngine) or + 8f (eager). The paper's 34·h
counts GeLU MLPs with f = 4h, multi-head K and V and dropout masks; none of those apply here. For Llama-3.1-70B
(q = h, k = v = h/8, f = 3.5h) the fused count is 33.5·h, close to 34 by coincidence; Qwen2.5-7B (f = 5.3h) gives 44·h.
FlashAttention never stores the a·s² score matrix, so the paper's 5·a·s/h term is absent and "selective" recompute
(which exists to drop that term) stores the same as none. Sequence parallelism splits all of it by tp (Megatron-Core
turns it on with TP; assumed whenever tp > 1), context parallelism splits the tokens. Full recompute keeps only each
layer's 2h input and rebuilds one layer's activations at a time during the backward pass.

**Pipeline**: under 1F1B the first stage holds activations of pp micro-batches for its L/pp layers — L layers' worth —
and with v interleaved chunks L·(1 + (pp−1)/(pp·v)) (arXiv 2205.05198 §4.2.3). The last stage holds one micro-batch
plus the logits.

**Forward-only passes** (old log-probs, reference, values) keep no activations for a backward pass, but their own
micro-batches (`logprob_micro_batch_tokens`) may hold more logits than the update's: whichever peak is higher counts.

**Offload** means DeepSpeed ZeRO-Offload / FSDP CPU-offload semantics: offloaded state lives in host memory throughout
training and streams to the GPU when used, so it leaves both the training peak and the state left resident while a
colocated rollout engine runs.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from rlsim.costs.layout import EngineLayout, TrainingLayout
from rlsim.costs.lora import adapter_params
from rlsim.errors import InfeasibleError
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS, LayerKind

GIB = 2**30
BF16 = 2
FP32 = 4
ADAM_STATE_BYTES = 12  # fp32 master weights + first and second moments (arXiv 1910.02054 §3.1)
ADAM_MOMENT_BYTES = 8  # the two moments alone: the optimizer's `state` tensors, which offloads copy one by one
# Megatron's main-gradient buffer is fp32 for bf16 training unless --grad-reduce-in-bf16 (megatron/training/arguments.py).
MEGATRON_GRAD_BYTES = 4
# Bytes per logit held at once while log-probabilities are computed, by `TrainingLayout.logprob_kernel`: the bf16
# logits the output head writes, plus what the kernel materialises (see training.LOGPROB_BYTES for the kernels). A fused
# kernel streams them (flash-attn's cross_entropy_loss); Megatron-Core's vocab-parallel cross-entropy keeps one fp32
# copy and works in place; NeMo-RL's DistributedLogprob holds the fp32 copy and two fp32 results at once (the shifted
# logits or the log-softmax, and the exponentials or the softmax it keeps for the backward pass).
LOGIT_BYTES = {"fused": BF16, "fp32_vocab_parallel": BF16 + FP32, "fp32_unfused": BF16 + 3 * FP32}
# Transformer Engine's FP8 copy of a weight and its transpose, one byte each (LMSYS "Unified FP8" blog, 2025-11-19: TE
# "keeps an extra transposed copy of quantized weights", so FP8 training saves little memory).
FP8_WEIGHT_COPY_BYTES = 2
# FSDP gathers the unit it computes and prefetches the next one (FSDP's default backward/forward prefetch of one unit).
FSDP_GATHERED_LAYERS = 2

Implementation = Literal["fused", "eager"]


def kernel_implementation(backend: str) -> Implementation:
    """How elementwise work is implemented: Megatron uses TransformerEngine's fused kernels; the FSDP backends run the
    Hugging Face model code eagerly (one kernel per PyTorch op)."""
    return "fused" if backend == "megatron" else "eager"


@dataclass(frozen=True)
class RoleMemory:
    """What one GPU of a role holds, by component, against what it has."""

    role: str
    pool: str
    capacity_bytes: float
    components: dict[str, float] = field(default_factory=dict)
    kv_cache_bytes: float | None = None  # rollout only: the cache budget left after everything else
    notes: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> float:
        return sum(self.components.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def require(self) -> None:
        """Raise InfeasibleError (role, needed, available, what would fit) unless this fits."""
        if not self.fits:
            raise InfeasibleError(self.role, self.total_bytes, self.capacity_bytes, self.hints)


# ---------------------------------------------------------------------------------------------------- model state


def model_state_bytes(params: float, zero_stage: int, shards: int, grad_bytes: float = BF16) -> dict[str, float]:
    """Weights, gradients and Adam state of `params` parameters under a ZeRO stage over `shards` ranks (arXiv 1910.02054).

    With the default 2-byte gradients the sums are the paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N for stages 0-3.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, not {zero_stage}")
    return {
        "weights": BF16 * params / (shards if zero_stage >= 3 else 1),
        "gradients": grad_bytes * params / (shards if zero_stage >= 2 else 1),
        "optimizer": ADAM_STATE_BYTES * params / (shards if zero_stage >= 1 else 1),
    }


def parameters_per_gpu(spec: ModelSpec, layout: TrainingLayout) -> tuple[float, float]:
    """(dense, routed-expert) parameters one GPU holds before ZeRO sharding, averaged over pipeline stages."""
    expert = spec.routed_expert_params
    return (spec.total_params - expert) / (layout.tp * layout.pp), expert / (layout.ep * layout.pp)


def adapter_params_per_gpu(spec: ModelSpec, layout: TrainingLayout) -> tuple[float, float]:
    """(dense, routed-expert) LoRA adapter parameters one GPU holds before ZeRO sharding, as `parameters_per_gpu`."""
    dense = expert = 0.0
    for kind in LAYER_KINDS:
        if spec.layer_count(kind):
            d, e = adapter_params(spec, kind, layout.lora_rank)
            dense += spec.layer_count(kind) * d
            expert += spec.layer_count(kind) * e
    return dense / (layout.tp * layout.pp), expert / (layout.ep * layout.pp)


def zero_shards(layout: TrainingLayout) -> tuple[int, int]:
    """How many ranks ZeRO shards over: (dense parameters: dp·cp, routed experts: tp·cp·dp/ep)."""
    return layout.dp * layout.cp, max(1, layout.tp * layout.cp * layout.dp // layout.ep)


def training_model_state(spec: ModelSpec, layout: TrainingLayout) -> dict[str, float]:
    """Weights, gradients and optimizer state on one training GPU, offloaded parts left out. With LoRA the weights
    are frozen (16-bit, sharded as ZeRO-3 shards them, no gradients or optimizer state) and the adapters train."""
    dense, expert = parameters_per_gpu(spec, layout)
    dense_shards, expert_shards = zero_shards(layout)
    grad_bytes = MEGATRON_GRAD_BYTES if layout.backend == "megatron" else BF16
    trained = [(dense, dense_shards), (expert, expert_shards)]
    state = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    if layout.lora_rank:
        for params, shards in trained:
            state["weights"] += BF16 * params / (shards if layout.zero_stage >= 3 else 1)
        trained = list(zip(adapter_params_per_gpu(spec, layout), (dense_shards, expert_shards), strict=True))
    for params, shards in trained:
        for name, value in model_state_bytes(params, layout.zero_stage, shards, grad_bytes).items():
            state[name] += value
    if layout.offload_params:
        state["weights"] = 0.0
    if layout.offload_optimizer:
        state["optimizer"] = 0.0
    return state


def fsdp_gathered_bytes(spec: ModelSpec, layout: TrainingLayout) -> float:
    """ZeRO-3/FSDP working set: unsharded bf16 weights and gradients of the units being computed and prefetched.

    The root unit (embedding, final norm, output head) stays gathered from the start of the forward pass to the end of
    the backward pass (FSDP does not reshard the root after forward); decoder layers are gathered two at a time.
    """
    if layout.zero_stage < 3:
        return 0.0
    kind: LayerKind = "moe" if spec.layer_count("moe") else "dense"
    layer = sum(spec.layer_params(kind).values())
    routed = sum(v for k, v in spec.layer_params(kind).items() if k.startswith("mlp.experts"))
    layer_per_gpu = (layer - routed) / layout.tp + routed / layout.ep
    root = (spec.embedding_params + spec.architecture.hidden_size) / layout.tp
    return BF16 * (root + FSDP_GATHERED_LAYERS * layer_per_gpu) + BF16 * FSDP_GATHERED_LAYERS * layer_per_gpu


# ---------------------------------------------------------------------------------------------------- activations


def activation_bytes_per_token(spec: ModelSpec, kind: LayerKind, implementation: Implementation = "fused") -> float:
    """Bytes one token of one layer keeps for the backward pass without recompute, tp = cp = 1 (derivation above)."""
    arch = spec.architecture
    h, heads = arch.hidden_size, arch.num_attention_heads
    if arch.mla is not None:
        mla = arch.mla
        q = k = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
        v = out = heads * mla.v_head_dim
        # The low-rank latents are the inputs of the up-projections and of their RMSNorms.
        latents = 2 * BF16 * (mla.kv_lora_rank + (mla.q_lora_rank or 0))
    else:
        q = out = heads * arch.attention_head_dim
        k = v = arch.num_key_value_heads * arch.attention_head_dim
        latents = 0
    attention = BF16 * (2 * h + (q + k + v) + out) + FP32 * heads + latents
    swiglu_inputs = 2 if implementation == "fused" else 3  # gate, up (+ silu(gate) when eager)
    moe = arch.moe
    if kind == "moe" and moe is not None:
        routed = moe.num_experts_per_tok * moe.moe_intermediate_size
        shared = moe.n_shared_experts * moe.moe_intermediate_size
        mlp = (
            BF16 * 2 * h
            + BF16 * moe.num_experts_per_tok * h  # each token's copies permuted to its experts (the expert GEMM inputs)
            + FP32 * moe.num_experts  # router probabilities for the softmax backward
            + BF16 * (swiglu_inputs + 1) * (routed + shared)
        )
    else:
        mlp = BF16 * 2 * h + BF16 * (swiglu_inputs + 1) * arch.intermediate_size
    return attention + mlp


@dataclass(frozen=True)
class ActivationMemory:
    """Activation and logit bytes one training GPU holds at its peak (the first or the last pipeline stage)."""

    activations: float
    logits: float

    @property
    def total(self) -> float:
        return self.activations + self.logits


def _layer_activations(spec: ModelSpec, layout: TrainingLayout, tokens: int) -> dict[LayerKind, float]:
    """Bytes one layer of each kind keeps for a micro-batch of `tokens` per GPU (split by tp: sequence parallelism)."""
    impl = kernel_implementation(layout.backend)
    return {kind: activation_bytes_per_token(spec, kind, impl) * tokens / layout.tp
            for kind in LAYER_KINDS if spec.layer_count(kind)}


def _logit_bytes(spec: ModelSpec, layout: TrainingLayout, tokens: int) -> float:
    return LOGIT_BYTES[layout.logprob_kernel] * tokens * spec.architecture.vocab_size / layout.tp


def forward_pass_activation_memory(spec: ModelSpec, layout: TrainingLayout) -> ActivationMemory:
    """A forward-only pass (old log-probs, reference, values) keeps no activations for a backward pass: one layer's
    worth in flight, plus the logits of one micro-batch of `logprob_micro_batch_tokens` per GPU."""
    tokens = layout.forward_micro_batch_tokens
    return ActivationMemory(max(_layer_activations(spec, layout, tokens).values()), _logit_bytes(spec, layout, tokens))


def training_activation_memory(spec: ModelSpec, layout: TrainingLayout) -> ActivationMemory:
    """Activations of the layers in flight plus the logits of one micro-batch of `micro_batch_tokens` per GPU."""
    arch = spec.architecture
    tokens = layout.micro_batch_tokens  # per GPU: a micro-batch holds micro_batch_tokens·cp tokens over the CP group
    full = _layer_activations(spec, layout, tokens)
    layers = arch.num_hidden_layers
    all_layers_full = sum(spec.layer_count(kind) * value for kind, value in full.items())
    if layout.activation_recompute == "full":
        stored_all = layers * BF16 * arch.hidden_size * tokens / layout.tp  # each layer's input checkpoint
        rebuilt = max(full.values())  # the one layer being recomputed and back-propagated
    else:
        stored_all, rebuilt = all_layers_full, 0.0
    logits = _logit_bytes(spec, layout, tokens)
    p, v = layout.pp, layout.virtual_pipeline_stages
    if p == 1:
        return ActivationMemory(stored_all + rebuilt, logits)
    # First stage: pp micro-batches of L/pp layers in flight, more with interleaving (arXiv 2205.05198 §4.2.3).
    first = stored_all * (1 + (p - 1) / (p * v) if v > 1 else 1.0) + rebuilt
    last = stored_all / p + rebuilt
    if first >= last + logits:
        return ActivationMemory(first, 0.0)
    return ActivationMemory(last, logits)


# ---------------------------------------------------------------------------------------------------- training role


def reference_weight_bytes(spec: ModelSpec, layout: TrainingLayout) -> float:
    """The reference policy's bf16 weights on one training GPU, sharded as the policy's are. With LoRA the reference is
    the frozen base weights with the adapters switched off (verl's ref pass under LoRA): no copy of its own."""
    if layout.lora_rank:
        return 0.0
    return training_model_state(spec, replace(layout, offload_params=False))["weights"]


def training_memory_of(
    spec: ModelSpec, layout: TrainingLayout, capacity_bytes: float, *, critic: bool = False,
    reference: bool = False, pool: str = ""
) -> RoleMemory:
    """Peak memory of one training GPU, without hints: during the update, or during a forward-only pass where that
    holds more (its own micro-batches' logits). `reference`: a resident reference policy."""
    state = training_model_state(spec, layout)
    shared = {}
    reference_bytes = reference_weight_bytes(spec, layout) if reference else 0.0
    if reference_bytes:  # none under LoRA: the reference is the base with the adapters off
        shared["reference weights"] = reference_bytes
    gathered = fsdp_gathered_bytes(spec, layout)
    if gathered:
        shared["gathered weights and gradients (FSDP)"] = gathered
    if layout.precision == "fp8" and layout.backend == "megatron":
        # Transformer Engine keeps each weight's FP8 copy and its transpose beside the 16-bit one (torchao's float8
        # with FSDP2 casts while gathering instead, keeping none).
        shared["FP8 weight copies"] = FP8_WEIGHT_COPY_BYTES * sum(parameters_per_gpu(spec, layout))
    if critic:
        # The critic has the actor's shape and its own Adam state, and trains in the same step on the same GPUs.
        shared["critic"] = sum(state.values())
    update = _with_activations({**state, **shared}, training_activation_memory(spec, layout))
    # State moved to the host while generating comes back for the update only: the forward-only passes run without it
    # (verl reloads the optimizer in update_actor; NeMo-RL's prepare_for_lp_inference moves no gradients).
    moved = layout.moved_while_generating
    resident = {name: value for name, value in state.items()
                if not (name == "optimizer" and moved.optimizer or name == "gradients" and moved.any)}
    forward = _with_activations({**resident, **shared}, forward_pass_activation_memory(spec, layout))
    notes = []
    components = update
    if sum(forward.values()) > sum(update.values()):
        components = forward
        notes.append(f"the peak is in a forward-only pass: its micro-batches of {layout.forward_micro_batch_tokens} "
                     "tokens per GPU (logprob_micro_batch_tokens) hold the most logits")
    if layout.offload_params or layout.offload_optimizer:
        notes.append("offloaded training state lives in host memory and streams to the GPU when used")
    return RoleMemory("training", pool, capacity_bytes, components, notes=tuple(notes))


def _with_activations(components: dict[str, float], acts: ActivationMemory) -> dict[str, float]:
    out = {**components, "activations": acts.activations}
    if acts.logits:
        out["logits"] = acts.logits
    return out


def resident_training_bytes(spec: ModelSpec, layout: TrainingLayout, *, critic: bool, reference: bool) -> float:
    """Training state left on a GPU while a colocated rollout engine runs (gradients are freed after the update; what
    lives on the host throughout or moves there while generating is not on the GPU). `critic`: a critic of the
    actor's shape trains on the same GPUs; `reference`: a resident reference policy."""
    moved = layout.moved_while_generating
    state = training_model_state(spec, layout)
    models = 2 if critic else 1
    # The reference goes to the host with the policy's weights.
    reference_bytes = reference_weight_bytes(spec, layout) if reference and not moved.weights else 0.0
    kept = (0.0 if moved.weights else state["weights"]) + (0.0 if moved.optimizer else state["optimizer"])
    return models * kept + reference_bytes


# ---------------------------------------------------------------------------------------------------- rollout role


def engine_memory(spec: ModelSpec, layout: EngineLayout, capacity_bytes: float, *, weight_bytes: float,
                  resident_training_bytes: float, longest_sequence: int,
                  drafter: tuple[ModelSpec, float] | None = None) -> RoleMemory:
    """One engine GPU: weights (`weight_bytes` for the whole model), workspace, training state left beside it, and at
    least one longest sequence's KV inside its gpu_memory_utilization share of `capacity_bytes`; the rest is the
    KV-cache budget. `drafter`: a speculative draft model and its weight bytes, whose KV cache holds every token the
    target's does (vLLM sizes both caches for the same tokens)."""
    components = {
        "weights": weight_bytes / layout.tp,
        "workspace": rollout_workspace_bytes(spec, layout),
    }
    if drafter is not None:
        components["draft model weights"] = drafter[1] / layout.tp
    notes: list[str] = []
    if resident_training_bytes:
        components["training state (resident)"] = resident_training_bytes
        notes.append("colocated: training state that is not offloaded stays on the GPU while it generates")
    budget = layout.gpu_memory_utilization * capacity_bytes
    kv_cache = budget - sum(components.values())
    if drafter is not None:
        # The drafter's cache takes its share of every cached token's bytes.
        own, draft = kv_bytes_per_token_per_gpu(spec, layout.tp), kv_bytes_per_token_per_gpu(drafter[0], layout.tp)
        components["draft model KV cache"] = max(kv_cache, 0.0) * draft / (own + draft)
        kv_cache -= components["draft model KV cache"]
    longest = kv_bytes_per_token_per_gpu(spec, layout.tp) * longest_sequence
    components["KV cache, one longest sequence"] = longest
    if kv_cache >= longest:
        notes.append(f"KV cache {kv_cache / GIB:.1f} GiB holds {kv_cache / longest:.0f} sequences of "
                     f"{longest_sequence} tokens")
    return RoleMemory("rollout", layout.pool, budget, components, kv_cache_bytes=max(kv_cache, 0.0),
                      notes=tuple(notes))


def require_all(memories: Iterable[RoleMemory]) -> None:
    """Raise InfeasibleError for the first role that does not fit."""
    for memory in memories:
        memory.require()


def engine_kv_tokens(memory: RoleMemory, spec: ModelSpec, tp: int) -> int:
    """KV-cache tokens one engine holds: its GPUs' cache budget (`engine_memory`) over the bytes a token takes on each
    of its `tp` GPUs. The simulated engines, the estimate's and the metrics' capacity all count it here."""
    return int((memory.kv_cache_bytes or 0.0) // kv_bytes_per_token_per_gpu(spec, tp))


def kv_bytes_per_token_per_gpu(spec: ModelSpec, tp: int) -> float:
    """KV bytes a token costs on each GPU of an engine.

    GQA heads split over tp (replicated once tp exceeds the KV heads); MLA's latent is replicated on every GPU.
    """
    per_token = spec.kv_bytes_per_token
    if spec.architecture.mla is not None:
        return per_token
    return per_token / min(tp, spec.architecture.num_key_value_heads)


def rollout_workspace_bytes(spec: ModelSpec, engine: EngineLayout) -> float:
    """Activation workspace of one engine iteration: a layer's intermediate tensors for the token budget plus fp32 logits."""
    arch = spec.architecture
    tokens = engine.max_num_batched_tokens
    ffn = arch.moe.moe_intermediate_size * arch.moe.num_experts_per_tok if arch.moe else arch.intermediate_size
    per_token = BF16 * (4 * arch.hidden_size + 2 * ffn / engine.tp)
    logits = FP32 * engine.max_num_seqs * arch.vocab_size / engine.tp
    return tokens * per_token + logits


