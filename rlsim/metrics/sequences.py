"""From the sequence records: staleness and length distributions, and each rollout engine's load over time."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from rlsim.events import EventLog, SequenceRecord
from rlsim.metrics.facts import RunFacts


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
    """The dispatched sequences as columns, each held by its engine from submission until it finished (or the run
    ended); `generated` is the response tokens it produced by then."""

    engine: np.ndarray
    group: np.ndarray
    prompt: np.ndarray
    generated: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def of(cls, log: EventLog) -> SequenceArrays:
        records = [r for r in log.sequences if r.engine >= 0]
        column = np.array
        end = column([r.finished if r.finished >= 0 else log.wall_s for r in records], dtype=np.float64)
        return cls(column([r.engine for r in records], dtype=np.int64), column([r.group for r in records], dtype=np.int64),
                   column([r.prompt_tokens for r in records], dtype=np.float64),
                   column([r.response_tokens for r in records], dtype=np.float64),
                   column([r.submitted for r in records], dtype=np.float64), end)


def outstanding(arrays: SequenceArrays, engines: int, times: np.ndarray) -> np.ndarray:
    """[engine, time]: sequences submitted to the engine and not yet finished (running or queued) at each time."""
    counts = np.zeros((engines, times.size))
    for engine in range(engines):
        mine = arrays.engine == engine
        started = np.searchsorted(np.sort(arrays.start[mine]), times, side="right")
        ended = np.searchsorted(np.sort(arrays.end[mine]), times, side="right")
        counts[engine] = started - ended
    return counts


def estimated_kv_tokens(arrays: SequenceArrays, engines: int, times: np.ndarray) -> np.ndarray:
    """[engine, time]: KV-cache tokens the engine holds, estimated from submission and finish times alone.

    The log has no admission or per-iteration record, so each sequence is taken as admitted when submitted and as
    generating at a constant rate until it finished: it holds `generated · (t − start) / (end − start)` response
    tokens, and its group's prompt is held once per engine while any member is there (prefix sharing). Queueing
    behind a full cache makes this an over-estimate; the caller clips it to the cache size.
    """
    kv = np.zeros((engines, times.size))
    span = np.maximum(arrays.end - arrays.start, 1e-12)
    for engine in range(engines):
        mine = arrays.engine == engine
        if not mine.any():
            continue
        start, end = arrays.start[mine][:, None], arrays.end[mine][:, None]
        progress = np.clip((times[None, :] - start) / span[mine][:, None], 0.0, 1.0)
        live = (times[None, :] >= start) & (times[None, :] < end)
        kv[engine] = (arrays.generated[mine][:, None] * progress * live).sum(axis=0)
        # Shared prompts: one copy per group present on this engine, from its first member's submission to its last
        # member's end.
        groups, index = np.unique(arrays.group[mine], return_inverse=True)
        first = np.full(groups.size, np.inf)
        last = np.full(groups.size, -np.inf)
        np.minimum.at(first, index, arrays.start[mine])
        np.maximum.at(last, index, arrays.end[mine])
        prompt = np.zeros(groups.size)
        np.maximum.at(prompt, index, arrays.prompt[mine])
        held = (times[None, :] >= first[:, None]) & (times[None, :] < last[:, None])
        kv[engine] += (prompt[:, None] * held).sum(axis=0)
    return kv


@dataclass(frozen=True)
class EngineLoad:
    """Each engine's load sampled at `times`: outstanding sequences and the estimated KV-cache fraction in use."""

    times: np.ndarray
    outstanding: np.ndarray  # [engine, time]
    kv_fraction: np.ndarray  # [engine, time], clipped to 1


def engine_load(log: EventLog, facts: RunFacts, samples: int = 240) -> EngineLoad:
    """Engine load at `samples` evenly spaced instants over the run."""
    arrays = SequenceArrays.of(log)
    engines = facts.engines
    times = np.linspace(0.0, log.wall_s, samples)
    kv = estimated_kv_tokens(arrays, engines, times) / max(facts.kv_capacity_tokens, 1)
    return EngineLoad(times, outstanding(arrays, engines, times), np.minimum(kv, 1.0))
