"""Per-GPU memory of each role: weights, gradients, optimizer state, activations, and the KV cache left for rollout.

Formulas: mixed-precision Adam keeps 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master, m, v) bytes per parameter,
sharded by ZeRO stage over the data-parallel group (Rajbhandari et al., arXiv 1910.02054). Activations per layer follow
Korthikanti et al. (arXiv 2205.05198): 34·s·b·h bytes with sequence parallelism dividing by t, the 5·a·s²·b attention-score
term being absent because FlashAttention never materialises the scores; full recompute keeps only the 2·s·b·h layer input.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rlsim.config.schema import RolloutPlacement, Scenario, TrainingPlacement
from rlsim.errors import InfeasibleError
from rlsim.hardware import GPUProfile
from rlsim.models import ModelSpec

GIB = 2**30
BF16 = 2
FP32 = 4
ADAM_STATE_BYTES = 12  # fp32 master weights + first and second moments
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
# Activation bytes per token per hidden unit of one transformer layer without recompute (arXiv 2205.05198, Eq. 2 without
# the attention-score term); a full-recompute layer keeps only its bf16 input.
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = {"none": 34, "selective": 34, "full": 2}


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
        if not self.fits:
            raise InfeasibleError(self.role, self.total_bytes, self.capacity_bytes, self.hints)


def _sharded_params(spec: ModelSpec, tp: int, pp: int, ep: int) -> float:
    """Parameters one model-parallel rank holds: dense weights split over tp·pp, routed experts also over ep."""
    expert = spec.routed_expert_params
    return (spec.total_params - expert) / (tp * pp) + expert / (tp * pp * ep)


def training_memory(scenario: Scenario, spec: ModelSpec, gpu: GPUProfile) -> RoleMemory:
    """Peak memory of an actor-training GPU during the update (the largest phase)."""
    layout = scenario.placement.training
    params = _sharded_params(spec, layout.tp, layout.pp, layout.ep)
    shards = (layout.dp or 1) * layout.cp
    stage = layout.zero_stage
    weights = BF16 * params / (shards if stage >= 3 else 1)
    grads = BF16 * params / (shards if stage >= 2 else 1)
    optimizer = ADAM_STATE_BYTES * params / (shards if stage >= 1 else 1)
    activations = training_activation_bytes(spec, layout)
    components = {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": activations}
    if scenario.algorithm.critic:
        # The critic has the actor's shape and its own Adam state; it trains in the same step on the same GPUs.
        components["critic"] = weights + grads + optimizer
    hints = _training_hints(layout, spec)
    return RoleMemory("training", layout.pool or "", gpu.memory_bytes, components, hints=hints)


def training_activation_bytes(spec: ModelSpec, layout: TrainingPlacement) -> float:
    arch = spec.architecture
    tokens = layout.micro_batch_tokens / layout.cp
    per_layer_input = ACTIVATION_BYTES_PER_TOKEN_HIDDEN[layout.activation_recompute] * tokens * arch.hidden_size / layout.tp
    layers_per_stage = arch.num_hidden_layers / layout.pp
    # 1F1B: the first stage holds up to pp micro-batches in flight, so its activations cover about all layers' worth.
    in_flight = layout.pp
    stored = per_layer_input * layers_per_stage * in_flight
    if layout.activation_recompute == "full":
        # Recomputing one layer re-materialises its full activations once.
        stored += ACTIVATION_BYTES_PER_TOKEN_HIDDEN["none"] * tokens * arch.hidden_size / layout.tp
    logits = FP32 * tokens * arch.vocab_size / layout.tp  # fp32 logits for the log-prob of every token
    return stored + logits


def _training_hints(layout: TrainingPlacement, spec: ModelSpec) -> tuple[str, ...]:
    hints = []
    if layout.zero_stage < 3:
        hints.append("zero_stage: 3 (shard weights, gradients and optimizer over data parallelism)")
    if layout.activation_recompute != "full":
        hints.append("activation_recompute: full")
    if layout.micro_batch_tokens > 4096:
        hints.append(f"micro_batch_tokens: {layout.micro_batch_tokens // 2}")
    if spec.architecture.num_key_value_heads % (layout.tp * 2) == 0:
        hints.append(f"training tp: {layout.tp * 2}")
    return tuple(hints)


def resident_training_bytes(scenario: Scenario, spec: ModelSpec) -> float:
    """Training state left on a GPU while a colocated rollout engine runs (gradients are freed after the update)."""
    layout = scenario.placement.training
    params = _sharded_params(spec, layout.tp, layout.pp, layout.ep)
    shards = (layout.dp or 1) * layout.cp
    models = 2 if scenario.algorithm.critic else 1
    weights = 0.0 if layout.offload_params else BF16 * params / (shards if layout.zero_stage >= 3 else 1)
    optimizer = 0.0 if layout.offload_optimizer else ADAM_STATE_BYTES * params / (shards if layout.zero_stage >= 1 else 1)
    return models * (weights + optimizer)


def kv_bytes_per_token_per_gpu(spec: ModelSpec, tp: int) -> float:
    """KV bytes a token costs on each GPU of an engine.

    GQA heads split over tp (replicated once tp exceeds the KV heads); MLA's latent is replicated on every GPU.
    """
    per_token = spec.kv_bytes_per_token
    if spec.architecture.mla is not None:
        return per_token
    return per_token / min(tp, spec.architecture.num_key_value_heads)


def rollout_memory(scenario: Scenario, spec: ModelSpec, gpu: GPUProfile) -> RoleMemory:
    """An engine GPU: weights, workspace and at least one longest sequence's KV inside its gpu_memory_utilization share."""
    engine = scenario.placement.rollout
    arch = spec.architecture
    components = {
        "weights": spec.total_params * DTYPE_BYTES[scenario.model.dtype] / engine.tp,
        "workspace": rollout_workspace_bytes(spec, engine),
    }
    notes: list[str] = []
    hints: list[str] = []
    placement = scenario.placement
    if placement.mode in ("colocated", "hybrid") and engine.pool == placement.training.pool:
        resident = resident_training_bytes(scenario, spec)
        if resident:
            components["training state (resident)"] = resident
            notes.append("colocated: training state that is not offloaded stays on the GPU while it generates")
            if not placement.training.offload_optimizer:
                hints.append("training offload_optimizer: true")
            if not placement.training.offload_params:
                hints.append("training offload_params: true")
    budget = engine.gpu_memory_utilization * gpu.memory_bytes
    kv_cache = budget - sum(components.values())
    max_len = scenario.algorithm.max_prompt_tokens + scenario.algorithm.max_response_tokens
    longest = kv_bytes_per_token_per_gpu(spec, engine.tp) * max_len
    components["KV cache, one longest sequence"] = longest
    if kv_cache >= longest:
        notes.append(f"KV cache {kv_cache / GIB:.1f} GiB holds {kv_cache / longest:.0f} sequences of {max_len} tokens")
    else:
        if arch.num_attention_heads % (engine.tp * 2) == 0:
            hints.append(f"rollout tp: {engine.tp * 2}")
        if engine.gpu_memory_utilization < 0.95:
            hints.append(f"gpu_memory_utilization above {engine.gpu_memory_utilization}")
    return RoleMemory("rollout", engine.pool or "", budget, components, kv_cache_bytes=max(kv_cache, 0.0),
                      notes=tuple(notes), hints=tuple(hints))


def rollout_workspace_bytes(spec: ModelSpec, engine: RolloutPlacement) -> float:
    """Activation workspace of one engine iteration: a layer's intermediate tensors for the token budget plus fp32 logits."""
    arch = spec.architecture
    tokens = engine.max_num_batched_tokens
    ffn = arch.moe.moe_intermediate_size * arch.moe.num_experts_per_tok if arch.moe else arch.intermediate_size
    per_token = BF16 * (4 * arch.hidden_size + 2 * ffn / engine.tp)
    logits = FP32 * engine.max_num_seqs * arch.vocab_size / engine.tp
    return tokens * per_token + logits


def memory_report(scenario: Scenario, spec: ModelSpec, gpus: dict[str, GPUProfile]) -> list[RoleMemory]:
    """Per-GPU memory of each GPU role in the scenario; `gpus` maps pool name to its GPU profile."""
    placement = scenario.placement
    return [
        rollout_memory(scenario, spec, gpus[placement.rollout.pool or ""]),
        training_memory(scenario, spec, gpus[placement.training.pool or ""]),
    ]
