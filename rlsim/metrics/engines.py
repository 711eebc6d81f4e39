"""Generation engines over time, from the samples they record (`EngineSample`): KV-cache occupancy, sequences running
and waiting, the decode batch — per engine, time-weighted, and as binned series for the report.

An engine's samples define its state at every instant of the run. Counts (running, waiting) hold from one sample to
the next. The KV cache grows between two samples only by decoding: by the earlier sample's decode batch per iteration
run in between, which the samples count exactly; that growth is spread evenly over the time between them (the cache
fills by `decoding` tokens per iteration and iterations of a fixed batch take nearly equal time), and the value then
jumps to the later sample's (a finish frees KV, an admission reserves it). Before an engine's first sample everything
is zero; after its last (recorded when the run ends) its state holds.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rlsim.events import EventLog
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.steps import GENERATION_LABELS

ROLLOUT_ENGINE = "engine"  # the unit prefix of the policy's rollout engines (an LLM judge's are "judge")
COUNTERS = ("running", "waiting", "kv_tokens", "decoding", "iterations", "decode_iterations", "decode_kv_read_tokens")


@dataclass(frozen=True)
class EngineTrack:
    """One engine's samples as columns, in time order."""

    engine: str
    time: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    kv_tokens: np.ndarray
    decoding: np.ndarray
    iterations: np.ndarray
    decode_iterations: np.ndarray
    decode_kv_read_tokens: np.ndarray

    @property
    def kv_before_next(self) -> np.ndarray:
        """Per sample, the KV tokens just before the next sample's changes: grown by the decode batch per iteration
        run in between (the last sample's own value: nothing runs after it)."""
        grown = self.decoding[:-1] * np.diff(self.iterations)
        return np.concatenate([self.kv_tokens[:-1] + grown, self.kv_tokens[-1:]])

    def integral(self, values: np.ndarray, ends: np.ndarray | None, at: np.ndarray) -> np.ndarray:
        """∫₀ᵗ of the piecewise function that goes from values[i] at time[i] linearly to ends[i] just before
        time[i + 1] (ends None: holds values[i]), at each t of `at`."""
        time = self.time
        ends = values if ends is None else ends
        values = values.astype(np.float64)
        ends = ends.astype(np.float64)
        widths = np.diff(time)
        area = np.concatenate([[0.0], np.cumsum((values[:-1] + ends[:-1]) / 2 * widths)])
        at = np.asarray(at, dtype=np.float64)
        i = np.searchsorted(time, at, side="right") - 1
        before = i < 0
        i = np.maximum(i, 0)
        into = np.where(before, 0.0, at - time[i])
        # The slope of segment i; the last segment (and any of zero width) is flat.
        widths_ext = np.concatenate([widths, [0.0]])
        slope = np.divide(ends - values, widths_ext, out=np.zeros_like(values), where=widths_ext > 0)
        inside = values[i] * into + slope[i] * into * into / 2
        return np.where(before, 0.0, area[i] + inside)


def _engine_index(name: str, prefix: str, suffix: str = "") -> int:
    """The index of an engine named `prefix` + digits + `suffix`; -1 for any other name."""
    if not name.endswith(suffix):
        return -1
    digits = name[len(prefix):len(name) - len(suffix)]
    return int(digits) if name.startswith(prefix) and digits.isdigit() else -1


def engine_tracks(log: EventLog, prefix: str = ROLLOUT_ENGINE, suffix: str = "") -> Iterator[EngineTrack]:
    """The samples of the engines whose unit is `prefix` + index + `suffix` (a multi-agent run's engines end in
    `:<agent>`), per engine in index order, made one engine at a time (a long run's samples may be spilled to disk:
    rlsim.events.sample_spill)."""
    samples = log.engine_samples
    codes_of: dict[int, list[int]] = {}
    for code, name in enumerate(samples.engine_names):
        index = _engine_index(name, prefix, suffix)
        if index >= 0:
            codes_of.setdefault(index, []).append(code)
    indices = sorted(codes_of)
    for index, (time, counts) in zip(indices, samples.rows_by_engine([codes_of[i] for i in indices]), strict=True):
        if time.size:
            order = np.argsort(time, kind="stable")  # in time order; simultaneous samples as recorded
            yield EngineTrack(f"{prefix}{index}{suffix}", time[order], *counts[order].T)


def _generating(log: EventLog) -> dict[str, np.ndarray]:
    """Per engine: its prefill and decode spans as [n, 2] (start, end), in the log's order."""
    spans = log.spans
    generating = np.flatnonzero(spans.labelled(*GENERATION_LABELS) & spans.unit_mask(bool))
    unit = spans.unit[generating]
    order = np.argsort(unit, kind="stable")
    generating, unit = generating[order], unit[order]
    intervals = np.stack([spans.start[generating], spans.end[generating]], axis=1)
    bounds = np.flatnonzero(np.concatenate([[True], unit[1:] != unit[:-1], [True]])) if unit.size else np.zeros(1, int)
    return {spans.unit_names[unit[a]]: intervals[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(),
                                                                        strict=True)}


def _mean_over(track: EngineTrack, values: np.ndarray, ends: np.ndarray | None, intervals: np.ndarray) -> float:
    """Time-weighted mean of the track's function over the [n, 2] intervals (0 when they are empty)."""
    seconds = float((intervals[:, 1] - intervals[:, 0]).sum())
    if not seconds:
        return 0.0
    area = track.integral(values, ends, intervals[:, 1]) - track.integral(values, ends, intervals[:, 0])
    return float(area.sum()) / seconds


def engine_rows(log: EventLog, facts: RunFacts) -> list[dict]:
    """Per rollout engine: time-weighted means while it generated (its prefill and decode time) and maxima over the
    run of KV-cache occupancy (fraction of its cache), sequences running and waiting; its mean decode batch (per
    decode iteration) and iteration counts. A multi-agent run's engines, agent by agent, each of its own cache."""
    if facts.agents:
        return [row for name, own in facts.agents for row in _engine_rows(log, own, f":{name}")]
    return _engine_rows(log, facts, "")


def _engine_rows(log: EventLog, facts: RunFacts, suffix: str) -> list[dict]:
    capacity = max(facts.kv_capacity_tokens, 1)
    generating = _generating(log)
    rows = []
    for track in engine_tracks(log, suffix=suffix):
        intervals = generating.get(track.engine, np.zeros((0, 2)))
        seconds = float((intervals[:, 1] - intervals[:, 0]).sum())
        kv_end = track.kv_before_next
        steps = np.diff(track.decode_iterations)
        decode_iterations = int(track.decode_iterations[-1])
        rows.append({
            "engine": track.engine,
            "generating_s": seconds,
            "kv_occupancy_mean": _mean_over(track, track.kv_tokens, kv_end, intervals) / capacity,
            "kv_occupancy_max": float(max(track.kv_tokens.max(), kv_end.max())) / capacity,
            "running_mean": _mean_over(track, track.running, None, intervals),
            "running_max": int(track.running.max()),
            "waiting_mean": _mean_over(track, track.waiting, None, intervals),
            "waiting_max": int(track.waiting.max()),
            "decode_batch_mean": float((steps * track.decoding[:-1]).sum()) / decode_iterations
            if decode_iterations else 0.0,
            "iterations": int(track.iterations[-1]),
            "decode_iterations": decode_iterations,
        })
    return rows


def engine_summary(log: EventLog, facts: RunFacts) -> dict:
    """The rollout engines in metrics.json: per quantity, the mean over engines of each one's time-weighted mean while
    generating, and the maximum over engines and time."""
    rows = engine_rows(log, facts)

    def stats(key: str) -> dict:
        means = [r[f"{key}_mean"] for r in rows]
        return {"mean": float(np.mean(means)) if means else 0.0,
                "max": max((r[f"{key}_max"] for r in rows), default=0)}

    iterations = sum(r["decode_iterations"] for r in rows)
    return {
        "engines": len(rows),
        "kv_occupancy": stats("kv_occupancy"),
        "running": stats("running"),
        "waiting": stats("waiting"),
        "decode_batch_mean": sum(r["decode_batch_mean"] * r["decode_iterations"] for r in rows) / iterations
        if iterations else 0.0,
    }


@dataclass(frozen=True)
class EngineSeries:
    """Each rollout engine's state averaged over `bins` equal time bins of the run (the report's series)."""

    engines: tuple[str, ...]
    times: np.ndarray  # bin centres
    kv_fraction: np.ndarray  # [engine, bin]: mean KV-cache occupancy over the bin
    running: np.ndarray  # [engine, bin]
    waiting: np.ndarray  # [engine, bin]


def engine_series(log: EventLog, facts: RunFacts, bins: int = 240) -> EngineSeries:
    """Time-weighted means per bin: exact averages of the sampled state, however many samples fall in a bin, so a
    long run or a big cluster is drawn from a fixed number of points per engine."""
    edges = np.linspace(0.0, log.wall_s, bins + 1)
    width = np.diff(edges)
    width = np.where(width > 0, width, 1.0)
    engines, kv, running, waiting = [], [], [], []
    # A multi-agent run's engines agent by agent, each against its own cache.
    for suffix, own in [(f":{name}", agent) for name, agent in facts.agents] or [("", facts)]:
        for track in engine_tracks(log, suffix=suffix):
            engines.append(track.engine)
            kv.append(np.diff(track.integral(track.kv_tokens, track.kv_before_next, edges)) / width
                      / max(own.kv_capacity_tokens, 1))
            running.append(np.diff(track.integral(track.running, None, edges)) / width)
            waiting.append(np.diff(track.integral(track.waiting, None, edges)) / width)

    def rows(values: list[np.ndarray]) -> np.ndarray:
        return np.array(values) if values else np.zeros((0, bins))
    return EngineSeries(tuple(engines), (edges[:-1] + edges[1:]) / 2, rows(kv), rows(running), rows(waiting))
