"""Engine samples spilled to disk while the run goes on, and read back one engine at a time or in time order.

Engine samples are the largest table a long run records (68 bytes a sample; ~5,000 samples per RL step on 1,024 GPUs),
and every metric over them is per engine (rlsim.metrics.engines): an engine's samples in time order are all a metric
reads at once. So the recorder hands its samples over here a chunk at a time (at the end of an RL step, once the run
has recorded more than it keeps in memory), and the run holds a chunk, not the run.

A chunk is a stretch of one file, its rows grouped by engine (each engine's in recording order) with their position in the
chunk, so that reading one engine is one read per chunk. Reading in time order restores each chunk's recording
order, sorts it by time (stable) and merges the chunks in recording order: the same rows in the same order as a stable
sort of the whole table by time, as `SampleTable.in_time_order` gives (an engine books a preemption chain's samples
when the chain ends, so a chunk may hold samples older than the previous chunk's).

The file is an anonymous temporary file (tempfile.TemporaryFile: no name on disk), so it goes when nothing reads the
samples any more or the process ends in any way, even killed, and leaves nothing behind.
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from rlsim.events import EngineSample
from rlsim.events.tables import CHUNK, SAMPLE_COUNTERS, SampleColumns, SampleTable

COUNTERS = len(SAMPLE_COUNTERS)
# A spilled sample: its time, counters and position in the chunk as recorded (72 bytes). An engine's samples are
# consecutive rows of a chunk, so reading them is one read.
ROW = np.dtype([("time", np.float64), ("counters", np.int64, (COUNTERS,)), ("position", np.int64)])


@dataclass(frozen=True)
class _Chunk:
    """Where one spilled chunk is and what it holds: rows [offsets[e], offsets[e + 1]) of the chunk, which starts
    at byte `start` of `file`, are engine code e's."""

    file: BinaryIO
    start: int
    offsets: np.ndarray
    earliest: float  # the earliest sample time in the chunk

    @property
    def rows(self) -> int:
        return int(self.offsets[-1])

    def engine_rows(self, code: int) -> tuple[np.ndarray, np.ndarray]:
        """Engine `code`'s samples in this chunk, in recording order: (times, counters [n, COUNTERS])."""
        if code + 1 >= self.offsets.size:
            return np.zeros(0), np.zeros((0, COUNTERS), dtype=np.int64)
        a, b = int(self.offsets[code]), int(self.offsets[code + 1])
        rows = self._read(a, b - a)
        return rows["time"], rows["counters"]

    def in_recording_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole chunk as recorded: (engine codes, times, counters)."""
        rows = self._read(0, self.rows)
        engines = np.repeat(np.arange(self.offsets.size - 1), np.diff(self.offsets))
        order = np.empty(rows.size, dtype=np.int64)
        order[rows["position"]] = np.arange(rows.size)
        return engines[order], rows["time"][order], rows["counters"][order]

    def _read(self, first: int, count: int) -> np.ndarray:
        self.file.seek(self.start + ROW.itemsize * first)
        return np.frombuffer(self.file.read(ROW.itemsize * count), dtype=ROW)


class SampleSpill:
    """The chunks spilled so far, one after another in an anonymous temporary file of their own."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="rlsim-samples-")  # closed, and gone, with this object
        self.chunks: list[_Chunk] = []

    def __reduce__(self) -> tuple:
        raise TypeError("spilled engine samples live in their process's temporary file and cannot be pickled: "
                        "write the run folder (Result.save) and read its engine_samples.csv.gz instead")

    def spill(self, columns: SampleColumns) -> None:
        """Write the samples `columns` holds as one chunk and empty it. The rows are copied out a block at a time, so
        spilling holds little beyond the columns themselves (the first spill writes all a run kept in memory)."""
        engines, times, counters = columns.view()
        if not times.size:
            return
        order = np.argsort(engines, kind="stable")  # by engine, each in recording order
        offsets = np.searchsorted(engines[order], np.arange(len(columns.engines.names) + 1))
        start = self.file.seek(0, 2)  # at the end, after the chunks before
        for a in range(0, order.size, CHUNK):
            block = order[a:a + CHUNK]
            rows = np.empty(block.size, dtype=ROW)
            rows["time"], rows["counters"], rows["position"] = times[block], np.take(counters, block, axis=0), block
            self.file.write(rows.tobytes())
        self.chunks.append(_Chunk(self.file, start, offsets.astype(np.int64), float(times.min())))
        del engines, times, counters
        columns.clear()


@dataclass(frozen=True, eq=False)
class SpilledSamples:
    """Engine samples spilled to disk; iterates as `EngineSample`s in time order (as `SampleTable` does), and gives
    each engine's samples on its own without reading the others'."""

    spill: SampleSpill
    engine_names: tuple[str, ...]

    def __len__(self) -> int:
        return sum(chunk.rows for chunk in self.spill.chunks)

    def in_time_order(self) -> SpilledSamples:
        return self

    def rows_by_engine(self, groups: list[list[int]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Per group of engine codes: its samples (each engine's in recording order, engines in the group's order),
        as (times, counters [n, COUNTERS]); one group read from disk at a time."""
        for codes in groups:
            parts = [chunk.engine_rows(code) for code in codes for chunk in self.spill.chunks]
            yield (np.concatenate([t for t, _ in parts] or [np.zeros(0)]),
                   np.concatenate([c for _, c in parts] or [np.zeros((0, COUNTERS), dtype=np.int64)]))

    def time_ordered_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(engine codes, times, counters) blocks, together the whole table in time order (stable).

        Rows of the chunks read so far wait in `pending` until no later chunk holds an earlier sample; a later chunk's
        sample at the same time comes after them, as in a stable sort."""
        chunks = self.spill.chunks
        if not chunks:
            return
        later_earliest = np.minimum.accumulate([c.earliest for c in chunks][::-1])[::-1].tolist()[1:] + [np.inf]
        pending = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, COUNTERS), dtype=np.int64))
        for chunk, bound in zip(chunks, later_earliest, strict=True):
            engines, times, counters = (np.concatenate([old, new]) for old, new in
                                        zip(pending, chunk.in_recording_order(), strict=True))
            order = np.argsort(times, kind="stable")
            engines, times, counters = engines[order], times[order], np.take(counters, order, axis=0)
            ready = int(np.searchsorted(times, bound, side="right"))
            if ready:
                yield engines[:ready], times[:ready], counters[:ready]
            pending = (engines[ready:], times[ready:], counters[ready:])

    def __iter__(self) -> Iterator[EngineSample]:
        names = self.engine_names
        for engines, times, counters in self.time_ordered_blocks():
            for a in range(0, times.size, CHUNK):
                b = a + CHUNK
                for code, time, row in zip(engines[a:b].tolist(), times[a:b].tolist(), counters[a:b].tolist(),
                                           strict=True):
                    yield EngineSample(names[code], time, *row)

    def __getitem__(self, index: int) -> EngineSample:
        i = range(len(self))[index]
        for engines, times, counters in self.time_ordered_blocks():
            if i < times.size:
                return EngineSample(self.engine_names[engines[i]], float(times[i]), *counters[i].tolist())
            i -= times.size
        raise IndexError(index)

    def __eq__(self, other: object) -> bool:
        """Equal to any table, tuple or list of the same samples in the same order, in memory or spilled."""
        if isinstance(other, SampleTable | SpilledSamples | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
