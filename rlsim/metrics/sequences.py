"""From the sequence records: staleness and length distributions, and the sequences as columns."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsim.events import EventLog
from rlsim.events.tables import SequenceTable


def trained(log: EventLog) -> SequenceTable:
    """The sequences a step trained on."""
    return log.sequences.take(log.sequences.trained)


def staleness(sequences: SequenceTable) -> np.ndarray:
    """Per trained sequence: policy versions between generating it and training on it."""
    return (sequences.version_trained - sequences.version_started).astype(np.int64)


def staleness_histogram(log: EventLog) -> dict[str, int]:
    """Trained sequences by staleness (policy versions between generating and training), keys as JSON strings."""
    values, counts = np.unique(staleness(trained(log)), return_counts=True)
    return {str(v): int(c) for v, c in zip(values.tolist(), counts.tolist(), strict=True)}


def response_length_stats(log: EventLog) -> dict[str, float]:
    """Response tokens of the trained sequences: mean and percentiles."""
    lengths = trained(log).response_tokens.astype(np.float64)
    if not lengths.size:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    return {"mean": float(lengths.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(lengths.max())}


@dataclass(frozen=True)
class SequenceArrays:
    """The dispatched sequences as columns; `generated` is the response tokens each produced (by the run's end when
    it never finished)."""

    engine: np.ndarray
    group: np.ndarray
    prompt: np.ndarray
    generated: np.ndarray

    @classmethod
    def of(cls, log: EventLog) -> SequenceArrays:
        records = log.sequences.take(log.sequences.engine >= 0)
        return cls(records.engine.astype(np.int64), records.group.astype(np.int64),
                   records.prompt_tokens.astype(np.float64), records.response_tokens.astype(np.float64))
