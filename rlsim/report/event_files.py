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
from collections.abc import Iterable
from dataclasses import fields
from itertools import islice
from pathlib import Path

from rlsim.events import STAGES, EngineSample, EventLog, SequenceRecord, Span

SPAN_COLUMNS = tuple(f.name for f in fields(Span))
SEQUENCE_COLUMNS = tuple(f.name for f in fields(SequenceRecord))
STEP_COLUMNS = ("step", "start", "end", "samples", "tokens") + STAGES
ENGINE_SAMPLE_COLUMNS = EngineSample._fields
# zlib's own default rather than gzip's 9: on benchmarks/bench_step's log, the engine samples (2.8 MB of CSV) compress
# to the same 965 KiB in 176 ms instead of 390 ms, and a sweep or a plan writes a run folder for every point.
COMPRESS_LEVEL = 6


# What `events` may ask a run folder to hold beside metrics.json and report.html: "full" every event table and
# trace.json; "steps" the per-step table only; "none" neither; "auto" full unless the log has more than
# AUTO_FULL_MAX_SPANS spans (trace.json takes ~200 bytes a span: a long run on a large cluster would write gigabytes).
EVENT_CHOICES = ("auto", "full", "steps", "none")
AUTO_FULL_MAX_SPANS = 1_000_000


def event_tables(events: str, log: EventLog) -> str:
    """The tables "auto" (or the user's choice) comes to for this log: "full", "steps" or "none"."""
    if events == "auto":
        return "full" if len(log.spans) <= AUTO_FULL_MAX_SPANS else "steps"
    return events


# Rows formatted per chunk before compression: a long run's tables are streamed, never held as one text.
ROWS_PER_CHUNK = 65_536


def _write(path: Path, columns: tuple[str, ...], rows: Iterable) -> None:
    # zlib's output depends only on the bytes fed to it, not on how they are split: chunked writes give the same file.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                    compresslevel=COMPRESS_LEVEL) as out:
        rows = iter(rows)
        chunk = [columns]
        while chunk:
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerows(chunk)
            out.write(text.getvalue().encode())
            chunk = list(islice(rows, ROWS_PER_CHUNK))


def write_event_files(log: EventLog, out: Path, tables: str = "full") -> list[Path]:
    """The event tables `tables` asks for: "full" all four, "steps" the per-step table only."""
    paths = [out / "steps.csv.gz"]
    _write(paths[0], STEP_COLUMNS, ([s.step, s.start, s.end, s.samples, s.tokens] + [s.stages.get(n, 0.0) for n in STAGES]
                                    for s in log.steps))
    if tables != "full":
        return paths
    paths += [out / "spans.csv.gz", out / "sequences.csv.gz", out / "engine_samples.csv.gz"]
    _write(paths[1], SPAN_COLUMNS, ([getattr(s, c) for c in SPAN_COLUMNS] for s in log.spans))
    _write(paths[2], SEQUENCE_COLUMNS, ([getattr(r, c) for c in SEQUENCE_COLUMNS] for r in log.sequences))
    _write(paths[3], ENGINE_SAMPLE_COLUMNS, log.engine_samples)
    return paths
