"""A rollout in flight: the mutable state a rollout engine advances. Its immutable record is written when it ends."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class Rollout:
    """One response being generated for one prompt of a group (a GRPO group shares its prompt)."""

    seq_id: int
    group: int
    prompt_tokens: int
    target_tokens: int  # response length it will reach, already clipped at max_response_tokens
    truncated: bool  # target was clipped at the cap
    submitted: float
    generated: int = 0  # response tokens produced so far
    version_started: int = -1  # policy version of its first generated token (-1: not started)
    engine: int = -1
    preemptions: int = 0
    finished: float = -1.0
    admitted: float = -1.0  # first admission by an engine (-1: not yet)
    admissions: int = 0  # so far: the first, then one after each preemption, interruption or released tool call

    @property
    def context_tokens(self) -> int:
        """Tokens in its KV cache once prefilled: prompt plus generated so far."""
        return self.prompt_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.target_tokens - self.generated

    @property
    def done(self) -> bool:
        return self.generated >= self.target_tokens
