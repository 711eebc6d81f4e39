"""What training work costs, as values: seconds one GPU spends on a pass by what it did (`TrainingTime`), one
layer's share of it (`LayerTime`) and a data-parallel rank's pipeline stages (`PipelineTime`)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from rlsim.models.spec import LayerKind


# TrainingTime and LayerTime are values, never changed once made, but not frozen: a frozen dataclass sets each field
# through object.__setattr__, which made building them (millions per async run) a sixth of a run's host time.
@dataclass(slots=True)
class TrainingTime:
    """Seconds one GPU spends on a piece of training work, by what it was doing. `total` is its wall time."""

    forward: float = 0.0
    backward: float = 0.0
    recompute: float = 0.0
    exposed_collective: float = 0.0
    pipeline_bubble: float = 0.0
    optimizer: float = 0.0
    barrier: float = 0.0  # waiting for other pipeline stages to finish their own update

    # Spelled out field by field: the trainer adds and totals these hundreds of thousands of times per run.
    @property
    def total(self) -> float:
        return (self.forward + self.backward + self.recompute + self.exposed_collective + self.pipeline_bubble
                + self.optimizer + self.barrier)

    def __add__(self, other: TrainingTime) -> TrainingTime:
        return TrainingTime(self.forward + other.forward, self.backward + other.backward,
                            self.recompute + other.recompute, self.exposed_collective + other.exposed_collective,
                            self.pipeline_bubble + other.pipeline_bubble, self.optimizer + other.optimizer,
                            self.barrier + other.barrier)

    @staticmethod
    def sum(times: Iterable[TrainingTime]) -> TrainingTime:
        """Σ times, added in order as `+` would, without making a TrainingTime per addition."""
        forward = backward = recompute = exposed = bubble = optimizer = barrier = 0.0
        for t in times:
            forward += t.forward
            backward += t.backward
            recompute += t.recompute
            exposed += t.exposed_collective
            bubble += t.pipeline_bubble
            optimizer += t.optimizer
            barrier += t.barrier
        return TrainingTime(forward, backward, recompute, exposed, bubble, optimizer, barrier)

    def labels(self, forward_label: str = "train_forward") -> dict[str, float]:
        """GPU-seconds by simulator label; recompute runs inside the backward pass. Log-prob passes use "logprob"."""
        return {
            forward_label: self.forward,
            "train_backward": self.backward + self.recompute,
            "optimizer": self.optimizer,
            "exposed_collective": self.exposed_collective,
            "pipeline_bubble": self.pipeline_bubble,
            "barrier": self.barrier,
        }


# TrainingTime's fields in the order its constructor takes them.
TRAINING_TIME_FIELDS = tuple(f.name for f in fields(TrainingTime))


@dataclass(frozen=True)
class PipelineTime:
    """One data-parallel rank's work: what the GPUs of each pipeline stage did. Every stage's total is the wall time."""

    stages: tuple[TrainingTime, ...]

    @property
    def seconds(self) -> float:
        return max(stage.total for stage in self.stages)

    @property
    def bubble_fraction(self) -> float:
        """The first stage's pipeline bubble as a fraction of the wall time."""
        return self.stages[0].pipeline_bubble / self.seconds


@dataclass(slots=True)
class LayerTime:
    """One layer's (or the output head's) share of one pass over a micro-batch on one GPU."""

    gemm: float = 0.0
    attention: float = 0.0
    elementwise: float = 0.0
    collective: float = 0.0  # TP, CP and EP communication on the critical path

    @property
    def compute(self) -> float:
        return self.gemm + self.attention + self.elementwise

    def __add__(self, other: LayerTime) -> LayerTime:
        return LayerTime(self.gemm + other.gemm, self.attention + other.attention,
                         self.elementwise + other.elementwise, self.collective + other.collective)



def sum_by_kind(counts: dict[LayerKind, int], times: dict[LayerKind, LayerTime]) -> LayerTime:
    """Σ over layers of their times, as count × time per kind (the same result, without a sum per layer); `counts`
    in a fixed order, so the floating-point sum is the same in every process."""
    gemm = attention = elementwise = collective = 0.0
    for kind, count in counts.items():
        t = times[kind]
        gemm += t.gemm * count
        attention += t.attention * count
        elementwise += t.elementwise * count
        collective += t.collective * count
    return LayerTime(gemm, attention, elementwise, collective)
