"""The architecture of a transformer, in the field names of its Hugging Face config.json so a user can paste them."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlsim.fields import Flag, Frozen, NonNegativeInt, PositiveInt


class MoE(Frozen):
    """Mixture-of-experts feed-forward layers (Qwen3-MoE, DeepSeek-V3 naming)."""

    num_experts: PositiveInt = Field(description="routed experts per MoE layer (n_routed_experts)")
    num_experts_per_tok: PositiveInt = Field(description="routed experts each token is sent to (top-k)")
    moe_intermediate_size: PositiveInt = Field(description="FFN width of one routed expert")
    n_shared_experts: NonNegativeInt = Field(0, description="always-on shared experts per MoE layer")
    first_k_dense_replace: NonNegativeInt = Field(0, description="leading layers that keep a dense FFN of intermediate_size")

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoE:
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) exceeds num_experts ({self.num_experts})"
            )
        return self

    def experts_touched(self, tokens: float) -> float:
        """Routed experts of a layer that `tokens` tokens route to at least once, in expectation: each token picks
        top-k of E experts, so an expert escapes one token with probability 1 - k/E and all of them with
        (1 - k/E)^tokens. This assumes routing spread evenly and independently over the experts; real routers favour
        some experts, which touches fewer. Below E/k tokens the plain bound tokens·k overstates it by up to a third,
        which is the decode batch range of an engine's long tail."""
        experts, top_k = self.num_experts, self.num_experts_per_tok
        return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


class MLA(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): K and V are compressed into a shared latent that the KV cache stores."""

    q_lora_rank: PositiveInt | None = Field(None, description="rank of the query compression; null = full-rank queries")
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class Architecture(Frozen):
    """Shapes that determine parameters, FLOPs and KV-cache bytes. Derived sizes live in ModelSpec, never here."""

    hidden_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    head_dim: PositiveInt | None = Field(None, description="defaults to hidden_size / num_attention_heads")
    intermediate_size: PositiveInt = Field(description="FFN width of dense layers (SwiGLU: gate, up and down)")
    vocab_size: PositiveInt
    tie_word_embeddings: Flag = False
    attention_bias: Flag = Field(False, description="bias on the Q, K and V projections (Qwen2.5)")
    qk_norm: Flag = Field(False, description="RMSNorm on queries and keys per head (Qwen3)")
    hidden_act: Literal["silu", "gelu"] = "silu"
    moe: MoE | None = None
    mla: MLA | None = None

    @model_validator(mode="after")
    def _heads_consistent(self) -> Architecture:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("head_dim is required when hidden_size is not a multiple of num_attention_heads")
        return self

    @model_validator(mode="after")
    def _variants_modelled(self) -> Architecture:
        if self.moe is not None and self.moe.first_k_dense_replace >= self.num_hidden_layers:
            raise ValueError(
                f"moe.first_k_dense_replace ({self.moe.first_k_dense_replace}) leaves no MoE layer among "
                f"num_hidden_layers ({self.num_hidden_layers}); drop the moe block for a dense model"
            )
        if self.mla is not None and (self.attention_bias or self.qk_norm):
            # No published MLA model has either; counting them would mean guessing which projections they apply to.
            raise ValueError("attention_bias and qk_norm are not modelled together with mla")
        return self

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads
