"""What each agent of a multi-agent run did (scenario `agents:`): its GPUs, its calls, and its share of every step."""
from __future__ import annotations

from dataclasses import dataclass

from rlsim.events import StepRecord


@dataclass(frozen=True)
class AgentRecord:
    """One agent: the GPU ranges its engines and training ranks run on (no other agent's), how many calls each
    trajectory makes to it, and per RL step its own stages (generation and reward are the step's; the training
    stages and the weight update its own), the calls it trained on and their tokens."""

    name: str
    model: str
    gpus: tuple[tuple[int, int], ...]  # (first GPU, count) ranges, disjoint
    calls_per_trajectory: int
    steps: tuple[StepRecord, ...]
    generated_tokens: int  # response tokens its engines generated, trained or not
    seq_ids: tuple[int, ...] = ()  # its calls' rollouts (their sequence records), in the order they were sent

    @property
    def gpu_count(self) -> int:
        return sum(count for _, count in self.gpus)
