"""The event log's big tables as columns: spans, engine samples and sequence records.

A long run records millions of spans and samples. As Python objects each costs ~150–250 bytes and the collector
walks them all; as columns of machine numbers while the run appends and numpy arrays over them once frozen, a span
costs 39 bytes, a sample 68 and a sequence 83, and metrics read them with array operations. The columns are librt
`vec`s (mypy's runtime library: growable arrays of machine numbers), which compiled code appends to without making a
Python object of any value; a struct pack a row into a bytearray, before them, parsed each value back out of the
float or int made for it (a production step records ~50,000 samples, ~17,000 spans and 8,192 sequences). The tables
still iterate as `Span`, `EngineSample` and `SequenceRecord` records, so code that wants records gets them (made on
demand, never all kept).

Strings (labels, stages, units, engine names) are stored as small integer codes into a table's own name list.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from operator import attrgetter
from types import NotImplementedType
from typing import Any

import numpy as np
from librt.vecs import append, vec
from mypy_extensions import i16, i32, i64, u8

from rlsim.events import LABELS, RUN_END, EngineSample, SequenceRecord, Span

LABEL_CODE = {label: code for code, label in enumerate(LABELS)}
# Records are made a chunk at a time when a table is iterated: iterating never holds the whole table as objects.
CHUNK = 65_536


def same_records(table: Any, other: object) -> bool | NotImplementedType:
    """A table equals another table of its kind, or a tuple or list, holding the same records in the same order.

    Each table's __eq__ calls it: `__eq__ = same_records` in the class body is not a method once mypyc compiles the
    class (rlsim/compiled_engine.py). A class that defines __eq__ and not __hash__ is unhashable, as a table of mutable
    arrays should be."""
    if isinstance(other, type(table) | tuple | list):
        return len(table) == len(other) and all(a == b for a, b in zip(table, other, strict=True))
    return NotImplemented


def rebuilt_from_fields(table: Any) -> tuple[Any, tuple[Any, ...]]:
    """How pickle and copy rebuild a table: its class called with its fields. Compiled by mypyc (the wheel's engine,
    rlsim/compiled_engine.py), a frozen dataclass would otherwise be rebuilt by setting its fields one by one, which
    frozen refuses."""
    return type(table), tuple(getattr(table, field.name) for field in fields(table))


class Names:
    """Strings ↔ small integer codes, in order of first use."""

    def __init__(self, names: Iterable[str] = ()):
        self.names: list[str] = []
        self.codes: dict[str, int] = {}
        for name in names:
            self.code(name)

    def code(self, name: str) -> int:
        code = self.codes.get(name)
        if code is None:
            code = self.codes[name] = len(self.names)
            self.names.append(name)
        return code


SPAN_COLUMNS = (("first_gpu", "i"), ("gpu_count", "i"), ("start", "d"), ("end", "d"), ("label", "b"),
                ("stage", "h"), ("step", "i"), ("version", "i"), ("unit", "i"))


class SpanColumns:
    """Spans appended one at a time while the run goes on, a librt `vec` column a field (as `SampleColumns`: compiled,
    a span's numbers are appended as machine numbers); `label`, `stage` and `unit` coded."""

    def __init__(self, stages: Names | None = None, units: Names | None = None):
        self.stages = stages or Names()
        self.units = units or Names()
        self.first_gpu: vec[i32] = vec[i32]()
        self.gpu_count: vec[i32] = vec[i32]()
        self.start: vec[float] = vec[float]()
        self.end: vec[float] = vec[float]()
        self.label: vec[u8] = vec[u8]()  # LABEL_CODE's, all below 128: read back as SPAN_COLUMNS' signed bytes
        self.stage: vec[i16] = vec[i16]()
        self.step: vec[i32] = vec[i32]()
        self.version: vec[i32] = vec[i32]()
        self.unit: vec[i32] = vec[i32]()

    def __len__(self) -> int:
        return len(self.start)

    def append(self, first_gpu: int, gpu_count: int, start: float, end: float, label: str, stage: str, step: int,
               version: int, unit: str) -> None:
        self.add(first_gpu, gpu_count, start, end, LABEL_CODE[label], self.stages.code(stage), step, version,
                 self.units.code(unit))

    def add(self, first_gpu: int, gpu_count: int, start: float, end: float, label: int, stage: int, step: int,
            version: int, unit: int) -> None:
        """`append` of a span whose label, stage and unit are coded (`LABEL_CODE`, `stages`, `units`): an engine
        records a busy span at every change of its work's kind, and codes its names once."""
        self.first_gpu = append(self.first_gpu, first_gpu)
        self.gpu_count = append(self.gpu_count, gpu_count)
        self.start = append(self.start, start)
        self.end = append(self.end, end)
        self.label = append(self.label, label)
        self.stage = append(self.stage, stage)
        self.step = append(self.step, step)
        self.version = append(self.version, version)
        self.unit = append(self.unit, unit)

    def table(self) -> SpanTable:
        return SpanTable(first_gpu=np.frombuffer(memoryview(self.first_gpu), dtype=np.int32),
                         gpu_count=np.frombuffer(memoryview(self.gpu_count), dtype=np.int32),
                         start=np.frombuffer(memoryview(self.start), dtype=np.float64),
                         end=np.frombuffer(memoryview(self.end), dtype=np.float64),
                         label=np.frombuffer(memoryview(self.label), dtype=np.int8),
                         stage=np.frombuffer(memoryview(self.stage), dtype=np.int16),
                         step=np.frombuffer(memoryview(self.step), dtype=np.int32),
                         version=np.frombuffer(memoryview(self.version), dtype=np.int32),
                         unit=np.frombuffer(memoryview(self.unit), dtype=np.int32),
                         stage_names=tuple(self.stages.names), unit_names=tuple(self.units.names))


@dataclass(frozen=True, eq=False)
class SpanTable:
    """Spans as columns; iterates as `Span`s. `label` holds codes into LABELS, `stage` and `unit` codes into
    `stage_names` and `unit_names`."""

    first_gpu: np.ndarray
    gpu_count: np.ndarray
    start: np.ndarray
    end: np.ndarray
    label: np.ndarray
    stage: np.ndarray
    step: np.ndarray
    version: np.ndarray
    unit: np.ndarray
    stage_names: tuple[str, ...]
    unit_names: tuple[str, ...]

    @classmethod
    def from_spans(cls, spans: Iterable[Span]) -> SpanTable:
        columns = SpanColumns()
        for s in spans:
            columns.append(s.first_gpu, s.gpu_count, s.start, s.end, s.label, s.stage, s.step, s.version, s.unit)
        return columns.table()

    def __len__(self) -> int:
        return int(self.start.size)

    def __iter__(self) -> Iterator[Span]:
        labels, stages, units = LABELS, self.stage_names, self.unit_names
        for a in range(0, len(self), CHUNK):
            b = a + CHUNK
            yield from map(Span, self.first_gpu[a:b].tolist(), self.gpu_count[a:b].tolist(),
                           self.start[a:b].tolist(), self.end[a:b].tolist(),
                           [labels[c] for c in self.label[a:b].tolist()],
                           [stages[c] for c in self.stage[a:b].tolist()], self.step[a:b].tolist(),
                           self.version[a:b].tolist(), [units[c] for c in self.unit[a:b].tolist()])

    def records(self, index: np.ndarray) -> list[Span]:
        """The spans at `index`, as records."""
        return list(self.take(index))

    def __getitem__(self, index: int) -> Span:
        i = range(len(self))[index]
        return Span(int(self.first_gpu[i]), int(self.gpu_count[i]), float(self.start[i]), float(self.end[i]),
                    LABELS[self.label[i]], self.stage_names[self.stage[i]], int(self.step[i]), int(self.version[i]),
                    self.unit_names[self.unit[i]])

    def __eq__(self, other: object) -> bool | NotImplementedType:  # and so unhashable: see same_records
        return same_records(self, other)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return rebuilt_from_fields(self)

    @property
    def seconds(self) -> np.ndarray:
        return self.end - self.start

    def labelled(self, *labels: str) -> np.ndarray:
        """A mask of the spans carrying any of `labels`."""
        return np.isin(self.label, [LABEL_CODE[label] for label in labels])

    def unit_mask(self, predicate: Callable[[str], object]) -> np.ndarray:
        """A mask of the spans whose unit satisfies `predicate(unit) -> bool`."""
        allowed = np.array([bool(predicate(name)) for name in self.unit_names] or [False])
        return allowed[self.unit]

    def stage_mask(self, stages: Iterable[str]) -> np.ndarray:
        wanted = set(stages)
        allowed = np.array([name in wanted for name in self.stage_names] or [False])
        return allowed[self.stage]

    def take(self, index: np.ndarray) -> SpanTable:
        """The spans at `index` (a mask or indices), in that order."""
        return SpanTable(self.first_gpu[index], self.gpu_count[index], self.start[index], self.end[index],
                         self.label[index], self.stage[index], self.step[index], self.version[index],
                         self.unit[index], self.stage_names, self.unit_names)


def group_edges(spans: SpanTable, gpus: int, extra: list[int] | None = None) -> np.ndarray:
    """Cut the GPU range at every span's edge (and at `extra`): between two cuts every span covers all GPUs or none,
    so the GPUs of a group have identical timelines."""
    # Marked on the GPU range rather than sorted: a long run has millions of spans, a cluster thousands of GPUs.
    after = spans.first_gpu + spans.gpu_count
    extra = [int(edge) for edge in extra or []]
    cut = np.zeros(max([gpus, *extra, int(after.max()) if after.size else 0]) + 1, dtype=bool)
    cut[[0, gpus, *extra]] = True
    cut[spans.first_gpu] = True
    cut[after] = True
    return np.flatnonzero(cut).astype(np.int64)


def span_groups(spans: SpanTable, edges: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(span index, group index) of every span (of `mask`) with each group of `edges` it covers, spans in order and
    each span's groups in GPU order."""
    index = np.arange(len(spans)) if mask is None else np.flatnonzero(mask)
    first = spans.first_gpu[index].astype(np.int64)
    # Spans reaching past the edges (a slice of the GPU range) are cut at them.
    lo = np.searchsorted(edges, first)
    hi = np.minimum(np.searchsorted(edges, first + spans.gpu_count[index]), edges.size - 1)
    count = hi - lo
    span = np.repeat(index, count)
    group = np.repeat(lo, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return span, group


class CoveringSpans:
    """The spans covering each group of `edges` (cut at every span's edges, so a span covers a group when it starts
    at or before the group's first GPU and ends past it), found a group at a time: those starting at the group's first
    GPU through the spans sorted by first GPU and time, and the few reaching in from a GPU before (weight syncs over
    every GPU, idle runs merged over many) kept apart. Expanding every span to every group it covers, then sorting,
    held several arrays of that expanded size at once."""

    def __init__(self, spans: SpanTable, edges: np.ndarray):
        first = spans.first_gpu.astype(np.int64)
        after = first + spans.gpu_count
        self.spans = spans
        self.edges = edges.astype(np.int64)
        self._order = np.lexsort((spans.end, spans.start, first))  # ties keep the table's order
        self._bounds = np.searchsorted(first[self._order], self.edges)
        next_edge = self.edges[np.minimum(np.searchsorted(self.edges, first, side="right"), self.edges.size - 1)]
        reaching = np.flatnonzero(after > next_edge)
        self._reaching, self._reaching_first, self._reaching_after = reaching, first[reaching], after[reaching]

    def __len__(self) -> int:
        """How many groups."""
        return max(self.edges.size - 1, 0)

    def of(self, group: int) -> np.ndarray:
        """Indices of the spans covering `group`, by start, end, then position in the table."""
        starting = self._order[self._bounds[group]:self._bounds[group + 1]]
        lo = self.edges[group]
        reaching = self._reaching[(self._reaching_first < lo) & (self._reaching_after > lo)]
        if not reaching.size:
            return starting
        index = np.concatenate([starting, reaching])
        return index[np.lexsort((index, self.spans.end[index], self.spans.start[index]))]


SAMPLE_COUNTERS = EngineSample._fields[2:]


class SampleColumns:
    """Engine samples appended while the run goes on, as typed columns: each sample's engine code, its time, and its
    SAMPLE_COUNTERS one row after another in one column.

    The columns are librt's `vec`s (mypy's runtime library): growable arrays of machine numbers. Compiled, `add`
    appends each value as the machine number it already is; a bytearray of struct-packed rows made every value a
    Python object first (a float or a large int allocated, then parsed back by the pack), and an engine records a
    sample at every boundary where its batch changes: ~50,000 a production step, ~105,000 at ×4 lengths. Interpreted,
    the same calls run as ordinary functions."""

    def __init__(self) -> None:
        self.engines = Names()
        self.engine: vec[i32] = vec[i32]()
        self.times: vec[float] = vec[float]()
        self.counters: vec[i64] = vec[i64]()

    def __len__(self) -> int:
        return len(self.engine)

    def code(self, engine: str) -> int:
        """The code `add` takes for `engine`: an engine records at every batch change, so it codes its name once."""
        return self.engines.code(engine)

    def add(self, engine: int, time: float, running: i64, waiting: i64, kv_tokens: i64, decoding: i64, iterations: i64,
            decode_iterations: i64, decode_kv_read_tokens: i64) -> None:
        """Append a sample of the engine coded `engine` (see `code`): its time, then SAMPLE_COUNTERS."""
        self.engine = append(self.engine, engine)
        self.times = append(self.times, time)
        counters = self.counters
        counters = append(counters, running)
        counters = append(counters, waiting)
        counters = append(counters, kv_tokens)
        counters = append(counters, decoding)
        counters = append(counters, iterations)
        counters = append(counters, decode_iterations)
        self.counters = append(counters, decode_kv_read_tokens)

    def append(self, engine: str, time: float, running: int, waiting: int, kv_tokens: int, decoding: int,
               iterations: int, decode_iterations: int, decode_kv_read_tokens: int) -> None:
        """Append a sample of the engine named `engine`."""
        self.add(self.engines.code(engine), time, running, waiting, kv_tokens, decoding, iterations, decode_iterations,
                 decode_kv_read_tokens)

    def view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The samples appended so far as (engine codes, times, counters [n, SAMPLE_COUNTERS]) arrays over the columns'
        memory (no copy): each keeps what it views alive, and later appends do not change it."""
        engine = np.frombuffer(memoryview(self.engine), dtype=np.int32)
        counters = np.frombuffer(memoryview(self.counters), dtype=np.int64).reshape(engine.size, len(SAMPLE_COUNTERS))
        return engine, np.frombuffer(memoryview(self.times), dtype=np.float64), counters

    def clear(self) -> None:
        """Empty the columns; the engines keep appending to this object."""
        self.engine = vec[i32]()
        self.times = vec[float]()
        self.counters = vec[i64]()

    def table(self) -> SampleTable:
        return SampleTable(*self.view(), tuple(self.engines.names))


@dataclass(frozen=True, eq=False)
class SampleTable:
    """Engine samples as columns, in the order recorded (an engine books a preemption chain's samples when the chain
    ends, after other engines recorded theirs); iterates as `EngineSample`s in time order, simultaneous ones as
    recorded. The metrics read each engine's samples on their own (`rows_by_engine`, then `engine_tracks` puts them in
    time order), so a run's table is sorted as a whole only when something iterates it (engine_samples.csv.gz)."""

    engine: np.ndarray  # codes into engine_names
    time: np.ndarray
    counters: np.ndarray  # [sample, SAMPLE_COUNTERS]
    engine_names: tuple[str, ...]

    @classmethod
    def from_samples(cls, samples: Iterable[EngineSample]) -> SampleTable:
        columns = SampleColumns()
        for s in samples:
            columns.append(*s)
        return columns.table()

    def __len__(self) -> int:
        return int(self.time.size)

    def __iter__(self) -> Iterator[EngineSample]:
        table = self.in_time_order()
        names = table.engine_names
        for a in range(0, len(table), CHUNK):
            b = a + CHUNK
            for code, time, row in zip(table.engine[a:b].tolist(), table.time[a:b].tolist(),
                                       table.counters[a:b].tolist(), strict=True):
                yield EngineSample(names[code], time, *row)

    def rows_by_engine(self, groups: list[list[int]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Per group of engine codes: its samples (each engine's in table order, engines in the group's order), as
        (times, counters [n, SAMPLE_COUNTERS])."""
        order = np.argsort(self.engine, kind="stable")
        bounds = np.searchsorted(self.engine[order], np.arange(len(self.engine_names) + 1))
        for codes in groups:
            index = np.concatenate([order[bounds[c]:bounds[c + 1]] for c in codes] or [np.zeros(0, dtype=np.intp)])
            yield self.time[index], np.take(self.counters, index, axis=0)  # rows, as in `in_time_order`

    def in_time_order(self) -> SampleTable:
        """The samples sorted by time, each engine's (and simultaneous ones') in recording order: an engine books a
        preemption chain's samples when the chain ends, after other engines recorded theirs."""
        if not (np.diff(self.time) < 0).any():
            return self
        order = np.argsort(self.time, kind="stable")
        # np.take along the rows: the same array as counters[order], which indexes a 2-D array by the slower general
        # path (a ×4-length step's 105,000 samples: 1.5 ms rather than 3.2).
        return SampleTable(self.engine[order], self.time[order], np.take(self.counters, order, axis=0),
                           self.engine_names)

    def __getitem__(self, index: int) -> EngineSample:
        """The sample at `index` in time order (sorting the table for each call when it is not: iterate instead)."""
        table = self.in_time_order()
        i = range(len(table))[index]
        return EngineSample(table.engine_names[table.engine[i]], float(table.time[i]), *table.counters[i].tolist())

    def __eq__(self, other: object) -> bool | NotImplementedType:  # and so unhashable: see same_records
        return same_records(self, other)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return rebuilt_from_fields(self)


SEQUENCE_COLUMNS = (("seq_id", "q"), ("group", "q"), ("engine", "i"), ("prompt_tokens", "q"), ("response_tokens", "q"),
                    ("truncated", "b"), ("submitted", "d"), ("finished", "d"), ("version_started", "i"),
                    ("version_trained", "i"), ("step_trained", "i"), ("preemptions", "i"), ("dropped_by", "b"),
                    ("admitted", "d"), ("readmissions", "i"), ("informative", "b"))
# SEQUENCE_COLUMNS by the kind of number each holds while the run goes on, a record's fields of a kind one after another
# in that kind's column ("b": flags and the `dropped_by` code, bytes read back as signed, as their struct code says).
_SEQUENCE_KINDS = {kind: tuple(name for name, code in SEQUENCE_COLUMNS if code == kind) for kind in "qibd"}
_SEQUENCE_DTYPES = {"q": np.int64, "i": np.int32, "b": np.int8, "d": np.float64}
_SEQUENCE_FLAGS = ("truncated", "informative")


class SequenceColumns:
    """Sequence records appended while the run goes on (`dropped_by` coded by name): a librt `vec` a kind of number
    (64-bit and 32-bit integers, bytes, floats), each holding its fields of a record one after another (compiled,
    appended as machine numbers, as `SampleColumns`); each field a column of its SEQUENCE_COLUMNS type once frozen."""

    def __init__(self) -> None:
        self.dropped_by = Names([""])
        self.longs: vec[i64] = vec[i64]()
        self.ints: vec[i32] = vec[i32]()
        self.byte_fields: vec[u8] = vec[u8]()
        self.floats: vec[float] = vec[float]()
        # A record's fields read at once: `append` takes records apart (the ledger appends fields, `append_row`).
        self._fields = attrgetter(*(name for name, _ in SEQUENCE_COLUMNS))

    def __len__(self) -> int:
        return len(self.floats) // len(_SEQUENCE_KINDS["d"])

    def append(self, record: SequenceRecord) -> None:
        self.append_row(*self._fields(record))

    def append_row(self, seq_id: int, group: int, engine: int, prompt_tokens: int, response_tokens: int,
                   truncated: bool, submitted: float, finished: float, version_started: int, version_trained: int,
                   step_trained: int, preemptions: int, dropped_by: str, admitted: float, readmissions: int,
                   informative: bool) -> None:
        """A sequence's fields (`SequenceRecord`'s, in SEQUENCE_COLUMNS' order) appended as they are, without the
        record: a step records every one of its sequences, and a record built only to be taken apart costs more
        than the row."""
        longs = self.longs
        longs = append(longs, seq_id)
        longs = append(longs, group)
        longs = append(longs, prompt_tokens)
        self.longs = append(longs, response_tokens)
        ints = self.ints
        ints = append(ints, engine)
        ints = append(ints, version_started)
        ints = append(ints, version_trained)
        ints = append(ints, step_trained)
        ints = append(ints, preemptions)
        self.ints = append(ints, readmissions)
        flags = self.byte_fields
        flags = append(flags, 1 if truncated else 0)
        flags = append(flags, self.dropped_by.code(dropped_by))
        self.byte_fields = append(flags, 1 if informative else 0)
        floats = self.floats
        floats = append(floats, submitted)
        floats = append(floats, finished)
        self.floats = append(floats, admitted)

    def table(self) -> SequenceTable:
        count = len(self)
        arrays: dict[str, np.ndarray] = {}
        for kind, column in (("q", self.longs), ("i", self.ints), ("b", self.byte_fields), ("d", self.floats)):
            names = _SEQUENCE_KINDS[kind]
            rows = np.frombuffer(memoryview(column), dtype=_SEQUENCE_DTYPES[kind]).reshape(count, len(names))
            for i, name in enumerate(names):
                arrays[name] = rows[:, i].astype(bool) if name in _SEQUENCE_FLAGS else rows[:, i].copy()
        return SequenceTable({name: arrays[name] for name, _ in SEQUENCE_COLUMNS}, tuple(self.dropped_by.names))


@dataclass(frozen=True, eq=False)
class SequenceTable:
    """Sequence records as columns (`columns[name]`, one per SequenceRecord field; `dropped_by` holds codes into
    `dropped_by_names`); iterates as `SequenceRecord`s."""

    columns: dict[str, np.ndarray]
    dropped_by_names: tuple[str, ...]

    @classmethod
    def from_records(cls, records: Iterable[SequenceRecord]) -> SequenceTable:
        columns = SequenceColumns()
        for r in records:
            columns.append(r)
        return columns.table()

    def __len__(self) -> int:
        return int(self.columns["seq_id"].size)

    def __getattr__(self, name: str) -> np.ndarray:
        # Called only for a name not found otherwise. `columns` itself is missing only on an instance under
        # construction (unpickling): refusing it ends the lookup there. Not `self.__dict__`: a class compiled by
        # mypyc keeps its fields in slots and has none, so that lookup would come back here for ever.
        if name == "columns":
            raise AttributeError(name)
        try:
            return self.columns[name]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self) -> Iterator[SequenceRecord]:
        names = [name for name, _ in SEQUENCE_COLUMNS]
        dropped = self.dropped_by_names
        for a in range(0, len(self), CHUNK):
            values = [self.columns[name][a:a + CHUNK].tolist() for name in names]
            values[names.index("dropped_by")] = [dropped[c] for c in values[names.index("dropped_by")]]
            yield from map(SequenceRecord, *values)

    def __getitem__(self, index: int) -> SequenceRecord:
        i = range(len(self))[index]
        return next(iter(self.take(np.array([i]))))

    def __eq__(self, other: object) -> bool | NotImplementedType:  # and so unhashable: see same_records
        return same_records(self, other)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return rebuilt_from_fields(self)

    def take(self, index: np.ndarray) -> SequenceTable:
        """The records at `index` (a mask or indices), in that order."""
        return SequenceTable({name: values[index] for name, values in self.columns.items()}, self.dropped_by_names)

    @property
    def trained(self) -> np.ndarray:
        """A mask of the records a step trained on."""
        return self.columns["step_trained"] >= 0

    def dropped_by_mask(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """A mask of the records whose `dropped_by` satisfies `predicate(name)`."""
        allowed = np.array([bool(predicate(name)) for name in self.dropped_by_names])
        return allowed[self.columns["dropped_by"]]

    @property
    def dropped_by_a_policy(self) -> np.ndarray:
        """A mask of the records a policy threw away (not those still in flight when the run ended)."""
        return self.dropped_by_mask(lambda name: name not in ("", RUN_END))
