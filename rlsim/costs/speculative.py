"""Speculative decoding as the rollout cost model prices it.

Each decode step of a speculating engine first drafts `drafted` tokens per sequence (a small draft model or a
one-layer head run `drafted` times, or a lookup in earlier text that costs no GPU time: n-gram / prompt lookup, and
history-based drafts such as RhymeRL's HistoSpec), then verifies them in one forward pass of the target over
`drafted + 1` tokens per sequence. With each drafted token accepted with probability α once the ones before it were,
a step yields on average (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", arXiv
2211.17192, eq. 1)

    E = (1 − α^(k+1)) / (1 − α)  tokens per sequence, k = drafted.

The engine's simulation still advances one token per sequence per (mean) step; this module prices that step as the
verify pass plus the drafts, divided by E. A memory-bound verify pass costs about one plain decode step, so small
batches gain nearly E; a compute-bound one costs k + 1 of them, so large batches lose (vLLM's blog, 2024-10-17:
up to 2.8x at low load, 1.4-1.8x slower at high load). Steps that also prefill run without speculation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlsim.costs.rollout import EngineCosts


@dataclass(frozen=True)
class Speculation:
    drafted: int  # tokens drafted per sequence per step (vLLM num_speculative_tokens)
    acceptance_rate: float  # α: a drafted token is accepted, given the ones before it were
    draft: EngineCosts | None  # the drafter's own iterations; None: drafts from lookups, no GPU time

    def __post_init__(self) -> None:
        if self.drafted < 1 or not 0 <= self.acceptance_rate < 1:
            raise ValueError(f"speculation needs drafted >= 1 and 0 <= acceptance_rate < 1, got {self}")

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens each sequence gains from one verify step (E above)."""
        alpha = self.acceptance_rate
        return (1 - alpha ** (self.drafted + 1)) / (1 - alpha)

    @property
    def verified(self) -> int:
        """Tokens per sequence the verify pass runs: the drafts and the one after them."""
        return self.drafted + 1
