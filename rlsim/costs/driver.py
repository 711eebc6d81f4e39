"""The RL driver's hand-off of a batch to its training workers (single-controller frameworks such as verl and NeMo-RL):
every worker call — a log-prob, reference or value pass, an actor or critic update — ships the batch from the driver
to the workers, serialised on the driver and deserialised on each worker, and forward passes send their results back.
The batch is padded to the longest prompt and response allowed (verl pads every sequence to max_prompt_length +
max_response_length), so the bytes grow with the batch and its caps, not with the GPUs; on many GPUs this fixed cost
is a larger share of a pass (verl's colocated old_log_prob/update_actor ratio rises from 0.31 at 16 GPUs to ~0.5 at
64-128 GPUs, docs/background/fidelity-evidence.md).

What travels: verl's rollout fields over the padded width — prompts and responses, input_ids, attention_mask and
position_ids, four int64 values per position — and per response position one fp32 value for every per-token tensor
a call adds (an update's old log-probs and advantages, a reference pass's log-probs) or returns (log-probs, and
entropy from the old-policy pass, verl computes it there).
"""
from __future__ import annotations

from dataclasses import dataclass

ID_BYTES_PER_POSITION = 4 * 8  # four int64 tensors over prompt + response
FP32_BYTES = 4


@dataclass(frozen=True, slots=True)
class DriverHandOff:
    """A batch's padded shape and the driver's rate for moving it (bytes/s, serialisation and transfer included)."""

    max_prompt_tokens: int
    max_response_tokens: int
    bytes_per_s: float

    def call_seconds(self, sequences: int, per_token_fp32: int) -> float:
        """Seconds one worker call spends moving `sequences` padded sequences and `per_token_fp32` fp32 values per
        response position (sent along or returned) through the driver."""
        width = self.max_prompt_tokens + self.max_response_tokens
        nbytes = sequences * (width * ID_BYTES_PER_POSITION + self.max_response_tokens * per_token_fp32 * FP32_BYTES)
        return nbytes / self.bytes_per_s


# fp32 values per response position each worker call moves on top of the ids: sent along (an update's old log-probs,
# advantages, reference log-probs with a KL term; a critic update's values and returns) and returned (log-probs,
# entropy; values).
def per_token_fp32(stage: str, *, reference: bool) -> int:
    if stage == "old_log_prob":
        return 2  # log-probs and entropy back
    if stage in ("ref", "values"):
        return 1
    if stage == "update_actor":
        return 2 + int(reference)  # old log-probs and advantages (and reference log-probs) along
    if stage == "update_critic":
        return 2  # old values and returns along
    raise ValueError(f"no worker call for stage {stage!r}")
