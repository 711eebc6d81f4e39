"""The event log as gzip-compressed CSV tables: spans.csv.gz, sequences.csv.gz, steps.csv.gz, engine_samples.csv.gz.

Why CSV and not Parquet: the log is O(sequences) rows (a few MB compressed even for a thousand GPUs), every tool
reads CSV (pandas.read_csv, polars, DuckDB, a spreadsheet) and Python writes it with the standard library, so the run
folder needs no new dependency. Floats are written with repr (they read back bit for bit) and gzip's header carries
no timestamp, so the same scenario and seed give byte-identical files.
"""
from __future__ import annotations

import csv
import gzip
import io
from dataclasses import fields
from pathlib import Path

from rlsim.events import STAGES, EngineSample, EventLog, SequenceRecord, Span

SPAN_COLUMNS = tuple(f.name for f in fields(Span))
SEQUENCE_COLUMNS = tuple(f.name for f in fields(SequenceRecord))
STEP_COLUMNS = ("step", "start", "end", "samples", "tokens") + STAGES
ENGINE_SAMPLE_COLUMNS = EngineSample._fields
# zlib's own default rather than gzip's 9: on benchmarks/bench_step's log, the engine samples (2.8 MB of CSV) compress
# to the same 965 KiB in 176 ms instead of 390 ms, and a sweep or a plan writes a run folder for every point.
COMPRESS_LEVEL = 6


def _write(path: Path, columns: tuple[str, ...], rows) -> None:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                    compresslevel=COMPRESS_LEVEL) as out:
        out.write(text.getvalue().encode())


def write_event_files(log: EventLog, out: Path) -> list[Path]:
    paths = [out / "spans.csv.gz", out / "sequences.csv.gz", out / "steps.csv.gz", out / "engine_samples.csv.gz"]
    _write(paths[0], SPAN_COLUMNS, ([getattr(s, c) for c in SPAN_COLUMNS] for s in log.spans))
    _write(paths[1], SEQUENCE_COLUMNS, ([getattr(r, c) for c in SEQUENCE_COLUMNS] for r in log.sequences))
    _write(paths[2], STEP_COLUMNS, ([s.step, s.start, s.end, s.samples, s.tokens] + [s.stages.get(n, 0.0) for n in STAGES]
                                    for s in log.steps))
    _write(paths[3], ENGINE_SAMPLE_COLUMNS, log.engine_samples)
    return paths
