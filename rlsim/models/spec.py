"""Sizes derived from an Architecture: parameter counts, FLOPs per token, KV-cache and weight bytes.

Everything here is computed on demand from the architecture's shapes; no size is ever stored.

Counting conventions (chosen to match the counts model authors publish, see tests/test_models.py):

* `total_params` counts every stored tensor once: the token embedding, the output head when it is not tied to the
  embedding, every layer's projections, biases and norm weights, the MoE router and all experts, and the final norm.
* `active_params` counts what one token touches: like `total_params`, but only the top-k routed experts (plus the
  shared experts) of each MoE layer. The token embedding counts, as in Qwen's model cards ("3.3B activated") and the
  project reference table; DeepSeek instead leaves the embedding lookup out ("36.6B activated"), which is
  `active_params_without_input_embedding`.
* FLOPs count 2 per multiply-accumulate of the matrix products (projections, router, experts, output head) and of the
  attention scores and weighted values. Norms, activations, softmax, RoPE and the embedding lookup are left out.
"""
from __future__ import annotations

from collections.abc import Mapping
from math import prod
from typing import Any, Literal, NamedTuple

from pydantic import Field

from rlsim.fields import Frozen, PositiveFloat
from rlsim.models.architecture import Architecture

LayerKind = Literal["dense", "moe"]
LAYER_KINDS: tuple[LayerKind, ...] = ("dense", "moe")


# Bytes per KV-cache element by vLLM's kv_cache_dtype: auto keeps the model's type (None: the spec's dtype_bytes);
# fp8 (E4M3, one scale per layer) is one byte.
KV_CACHE_DTYPE_BYTES: dict[str, float | None] = {"auto": None, "fp8": 1.0}

class Weight(NamedTuple):
    """One parameter tensor of a layer, named as in Hugging Face checkpoints (experts merged into one entry).

    A matrix has shape (in_features, out_features); a norm weight or bias has shape (size,).
    `copies` are stored (a routed expert's matrix once per expert) and each token uses `active` of them.
    """

    name: str
    shape: tuple[int, ...]
    copies: int = 1
    active: int = 1

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2


class GemmShape(NamedTuple):
    """A matrix product in one layer: `count` weight matrices of this shape, of which each token multiplies `active`."""

    name: str
    in_features: int
    out_features: int
    count: int
    active: int


class ModelSpec(Frozen):
    """A named architecture at a numeric precision, with every size derived from its shapes."""

    name: str
    architecture: Architecture
    dtype_bytes: PositiveFloat = Field(2.0, description="bytes per weight (2 = bf16, 1 = fp8)")
    kv_dtype_bytes: PositiveFloat | None = Field(None, description="bytes per KV-cache element (default: dtype_bytes)")

    @classmethod
    def from_architecture(
        cls,
        name: str,
        architecture: Architecture | Mapping[str, Any],
        dtype_bytes: float = 2.0,
        kv_dtype_bytes: float | None = None,
    ) -> ModelSpec:
        """A spec for an architecture written inline (e.g. in a scenario) rather than named from the catalog."""
        if not isinstance(architecture, Architecture):
            architecture = Architecture.model_validate(architecture)
        return cls(name=name, architecture=architecture, dtype_bytes=dtype_bytes, kv_dtype_bytes=kv_dtype_bytes)

    # ---- layers -------------------------------------------------------------------------------------------------

    @property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """The kind of each layer in order: MoE models keep `first_k_dense_replace` dense layers first."""
        return ("dense",) * self.layer_count("dense") + ("moe",) * self.layer_count("moe")

    def layer_count(self, kind: LayerKind) -> int:
        """How many layers are of `kind`."""
        arch = self.architecture
        dense = arch.num_hidden_layers if arch.moe is None else arch.moe.first_k_dense_replace
        if kind == "dense":
            return dense
        if kind == "moe":
            return arch.num_hidden_layers - dense
        raise ValueError(f"layer kind must be 'dense' or 'moe', not {kind!r}")

    def layer_weights(self, kind: LayerKind) -> tuple[Weight, ...]:
        """Every parameter tensor of one layer of `kind`."""
        if kind not in ("dense", "moe"):
            raise ValueError(f"layer kind must be 'dense' or 'moe', not {kind!r}")
        if kind == "moe" and self.architecture.moe is None:
            raise ValueError(f"{self.name} has no MoE layers")
        hidden = self.architecture.hidden_size
        return (
            Weight("input_layernorm", (hidden,)),
            *self._attention_weights(),
            Weight("post_attention_layernorm", (hidden,)),
            *(self._dense_ffn_weights() if kind == "dense" else self._moe_ffn_weights()),
        )

    def layer_params(self, kind: LayerKind) -> dict[str, int]:
        """Parameters stored in one layer of `kind`, by tensor name (all experts included)."""
        return {w.name: w.size * w.copies for w in self.layer_weights(kind)}

    def layer_gemm_shapes(self, kind: LayerKind) -> tuple[GemmShape, ...]:
        """The weight matrices of one layer of `kind` as (name, in_features, out_features, count, active)."""
        return tuple(
            GemmShape(w.name, w.shape[0], w.shape[1], w.copies, w.active)
            for w in self.layer_weights(kind)
            if w.is_matrix
        )

    def _attention_weights(self) -> tuple[Weight, ...]:
        arch = self.architecture
        hidden, heads = arch.hidden_size, arch.num_attention_heads
        mla = arch.mla
        if mla is not None:
            qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            if mla.q_lora_rank is None:
                query: tuple[Weight, ...] = (Weight("self_attn.q_proj", (hidden, heads * qk_dim)),)
            else:
                query = (
                    Weight("self_attn.q_a_proj", (hidden, mla.q_lora_rank)),
                    Weight("self_attn.q_a_layernorm", (mla.q_lora_rank,)),
                    Weight("self_attn.q_b_proj", (mla.q_lora_rank, heads * qk_dim)),
                )
            return (
                *query,
                Weight("self_attn.kv_a_proj_with_mqa", (hidden, mla.kv_lora_rank + mla.qk_rope_head_dim)),
                Weight("self_attn.kv_a_layernorm", (mla.kv_lora_rank,)),
                Weight(
                    "self_attn.kv_b_proj",
                    (mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim)),
                ),
                Weight("self_attn.o_proj", (heads * mla.v_head_dim, hidden)),
            )
        head_dim = arch.attention_head_dim
        q_width, kv_width = heads * head_dim, arch.num_key_value_heads * head_dim
        weights = [
            Weight("self_attn.q_proj", (hidden, q_width)),
            Weight("self_attn.k_proj", (hidden, kv_width)),
            Weight("self_attn.v_proj", (hidden, kv_width)),
        ]
        if arch.attention_bias:
            weights += [
                Weight("self_attn.q_proj.bias", (q_width,)),
                Weight("self_attn.k_proj.bias", (kv_width,)),
                Weight("self_attn.v_proj.bias", (kv_width,)),
            ]
        if arch.qk_norm:
            weights += [Weight("self_attn.q_norm", (head_dim,)), Weight("self_attn.k_norm", (head_dim,))]
        weights.append(Weight("self_attn.o_proj", (q_width, hidden)))
        return tuple(weights)

    def _dense_ffn_weights(self) -> tuple[Weight, ...]:
        return _swiglu("mlp", self.architecture.hidden_size, self.architecture.intermediate_size)

    def _moe_ffn_weights(self) -> tuple[Weight, ...]:
        hidden, moe = self.architecture.hidden_size, self.architecture.moe
        assert moe is not None
        routed = _swiglu("mlp.experts", hidden, moe.moe_intermediate_size, moe.num_experts, moe.num_experts_per_tok)
        # The shared experts run as one SwiGLU block of n_shared times the expert width (DeepSeek's implementation).
        shared = (
            _swiglu("mlp.shared_experts", hidden, moe.n_shared_experts * moe.moe_intermediate_size)
            if moe.n_shared_experts
            else ()
        )
        return (Weight("mlp.gate", (hidden, moe.num_experts)), *routed, *shared)

    # ---- parameter counts ---------------------------------------------------------------------------------------

    @property
    def vocab_matrix_params(self) -> int:
        """Size of one vocabulary × hidden matrix (the token embedding, and the output head when untied)."""
        return self.architecture.vocab_size * self.architecture.hidden_size

    @property
    def embedding_params(self) -> int:
        """Token embedding plus the output head when it is not tied: what 'non-embedding' counts leave out."""
        return self.vocab_matrix_params * (1 if self.architecture.tie_word_embeddings else 2)

    @property
    def total_params(self) -> int:
        return self._sum_layers(active=False) + self.embedding_params + self.architecture.hidden_size

    @property
    def routed_expert_params(self) -> int:
        """Parameters of all routed experts: the part expert parallelism splits (0 for dense models)."""
        if self.architecture.moe is None:
            return 0
        per_layer = sum(w.size * w.copies for w in self.layer_weights("moe") if w.name.startswith("mlp.experts"))
        return per_layer * self.layer_count("moe")

    @property
    def non_embedding_params(self) -> int:
        return self.total_params - self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses, counting the token embedding (Qwen's and the reference table's convention)."""
        return self._sum_layers(active=True) + self.embedding_params + self.architecture.hidden_size

    @property
    def active_params_without_input_embedding(self) -> int:
        """Active parameters without the embedding lookup, output head included (DeepSeek's convention)."""
        return self._sum_layers(active=True) + self.vocab_matrix_params + self.architecture.hidden_size

    @property
    def active_matmul_params(self) -> int:
        """Weight-matrix elements one token multiplies through, output head included (norms and biases left out)."""
        return self._sum_layers(active=True, matrices_only=True) + self.vocab_matrix_params

    def _sum_layers(self, *, active: bool, matrices_only: bool = False) -> int:
        total = 0
        for kind in ("dense", "moe"):
            count = self.layer_count(kind)
            if count:
                weights = self.layer_weights(kind)
                total += count * sum(
                    w.size * (w.active if active else w.copies) for w in weights if w.is_matrix or not matrices_only
                )
        return total

    # ---- bytes --------------------------------------------------------------------------------------------------

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies across all layers.

        GQA stores a key and a value per KV head: 2·L·n_kv·d_head. MLA stores the compressed latent and the shared
        RoPE key: L·(kv_lora_rank + qk_rope_head_dim).
        """
        arch = self.architecture
        element_bytes = self.kv_dtype_bytes if self.kv_dtype_bytes is not None else self.dtype_bytes
        if arch.mla is not None:
            per_layer = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        else:
            per_layer = 2 * arch.num_key_value_heads * arch.attention_head_dim
        return arch.num_hidden_layers * per_layer * element_bytes

    # ---- FLOPs --------------------------------------------------------------------------------------------------

    @property
    def lm_head_flops_per_token(self) -> int:
        """The output-head share of `forward_flops_per_token` (a prefill that keeps only the last logits skips it)."""
        return 2 * self.vocab_matrix_params

    @property
    def attention_flops_per_context_token(self) -> int:
        """FLOPs one query spends per key it attends to, over all layers: scores (q·k) plus weighted values (p·v).

        MLA is counted in its expanded form (per-head qk_nope+qk_rope and v_head dims), as in training.
        """
        arch = self.architecture
        if arch.mla is not None:
            qk_dim = arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim
            v_dim = arch.mla.v_head_dim
        else:
            qk_dim = v_dim = arch.attention_head_dim
        return 2 * arch.num_hidden_layers * arch.num_attention_heads * (qk_dim + v_dim)

    def forward_flops_per_token(self, context_tokens: float) -> float:
        """Forward FLOPs of one token whose query sees `context_tokens` earlier tokens (it also attends to itself)."""
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        return 2 * self.active_matmul_params + self.attention_flops_per_context_token * (context_tokens + 1)

    def forward_flops(self, sequence_tokens: float, context_tokens: float = 0) -> float:
        """Forward FLOPs of `sequence_tokens` causal tokens that follow `context_tokens` already-cached ones.

        Equals the sum of `forward_flops_per_token(context_tokens + i)` for i in 0 … sequence_tokens-1, in closed
        form: the matmul term is linear in the sequence, the attention term quadratic.
        """
        if sequence_tokens < 0 or context_tokens < 0:
            raise ValueError(
                f"sequence_tokens and context_tokens must be >= 0, got {sequence_tokens} and {context_tokens}"
            )
        keys_seen = sequence_tokens * context_tokens + sequence_tokens * (sequence_tokens + 1) / 2
        return 2 * self.active_matmul_params * sequence_tokens + self.attention_flops_per_context_token * keys_seen


def _swiglu(prefix: str, hidden: int, width: int, copies: int = 1, active: int | None = None) -> tuple[Weight, ...]:
    active = copies if active is None else active
    return (
        Weight(f"{prefix}.gate_proj", (hidden, width), copies, active),
        Weight(f"{prefix}.up_proj", (hidden, width), copies, active),
        Weight(f"{prefix}.down_proj", (width, hidden), copies, active),
    )
