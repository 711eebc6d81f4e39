"""From the sequence records: staleness and length distributions, and the sequences as columns."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from rlsim.events import EventLog, SequenceRecord


def trained(log: EventLog) -> list[SequenceRecord]:
    return [r for r in log.sequences if r.step_trained >= 0]


def staleness_histogram(log: EventLog) -> dict[str, int]:
    """Trained sequences by staleness (policy versions between generating and training), keys as JSON strings."""
    counts = Counter(r.staleness for r in trained(log))
    return {str(k): counts[k] for k in sorted(counts)}


def response_length_stats(log: EventLog) -> dict[str, float]:
    """Response tokens of the trained sequences: mean and percentiles."""
    lengths = np.array([r.response_tokens for r in trained(log)], dtype=np.float64)
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
        records = [r for r in log.sequences if r.engine >= 0]
        column = np.array
        return cls(column([r.engine for r in records], dtype=np.int64), column([r.group for r in records], dtype=np.int64),
                   column([r.prompt_tokens for r in records], dtype=np.float64),
                   column([r.response_tokens for r in records], dtype=np.float64))
