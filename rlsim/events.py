"""The event log: immutable records of what every GPU did and what happened to every sequence.

It is the single source of every metric. The simulator appends records while it runs and freezes them at the end;
metrics are pure functions over the frozen log and never see a SimPy object.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# The idle taxonomy (DESIGN.md): every GPU-second carries exactly one of these labels.
BUSY_LABELS = ("prefill", "decode", "logprob", "train_forward", "train_backward", "optimizer", "reward_model")
COMMUNICATION_LABELS = ("weight_sync", "reshard", "exposed_collective")
MEMORY_LABELS = ("offload", "reload")
IDLE_LABELS = ("tail", "starved", "barrier", "staleness_block", "pipeline_bubble", "unassigned")
LABELS = BUSY_LABELS + COMMUNICATION_LABELS + MEMORY_LABELS + IDLE_LABELS

# Stage names as verl logs them (timing_s/...).
STAGES = ("gen", "reward", "old_log_prob", "ref", "values", "update_actor", "update_critic", "weight_sync", "wait")


@dataclass(frozen=True, slots=True)
class Span:
    """GPUs [first_gpu, first_gpu + gpu_count) spent [start, end) doing `label` for `stage` of RL step `step`."""

    first_gpu: int
    gpu_count: int
    start: float
    end: float
    label: str
    stage: str
    step: int
    version: int  # policy version the GPUs hold (rollout) or produce (training)
    unit: str = ""  # the engine or training rank the span belongs to, e.g. "engine3", "dp5"

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class SequenceRecord:
    """One rollout: when it was asked for, generated and trained, with which policy versions."""

    seq_id: int
    group: int
    engine: int
    prompt_tokens: int
    response_tokens: int
    truncated: bool
    submitted: float
    finished: float
    version_started: int  # policy version that generated its first token
    version_trained: int  # policy version being trained when it was consumed (-1: dropped)
    step_trained: int  # RL step that consumed it (-1: dropped)
    preemptions: int = 0
    dropped_by: str = ""  # the policy that dropped it, when it was not trained

    @property
    def staleness(self) -> int:
        return self.version_trained - self.version_started if self.step_trained >= 0 else 0


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One RL step as the trainer saw it: when it started and ended, and seconds per verl stage."""

    step: int
    start: float
    end: float
    stages: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    tokens: int = 0  # prompt + response tokens trained on

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class EventLog:
    """Everything a run produced. Built once by the simulator; read by metrics and reports."""

    spans: tuple[Span, ...]
    sequences: tuple[SequenceRecord, ...]
    steps: tuple[StepRecord, ...]
    gpus: int
    wall_s: float  # simulated time from the start to the end of the last step
    events: int  # SimPy events processed: the simulator's work, independent of tokens in fast mode
