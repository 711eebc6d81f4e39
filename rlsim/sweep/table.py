"""The results table: one row per point with its axes and headline metrics, written as CSV and Parquet.

Rows hold only values that follow from the scenario and seed (no host timing), so the same sweep gives the same table
on any executor, in any order of completion, and after any number of resumes.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlsim.yamlsource import parse_path

# Headline columns: name -> where it is in metrics.json (docs/metrics.md defines each).
HEADLINE: dict[str, tuple[str, ...]] = {
    "gpus": ("gpus",),
    "step_time_s": ("step_time_s", "mean"),
    "step_time_p50_s": ("step_time_s", "p50"),
    "step_time_max_s": ("step_time_s", "max"),
    "tokens_per_s": ("throughput", "tokens_per_s"),
    "tokens_per_s_per_gpu": ("throughput", "tokens_per_s_per_gpu"),
    "samples_per_s": ("throughput", "samples_per_s"),
    "usd_per_1000_steps": ("cost", "usd_per_1000_steps"),
    "gpu_hours_per_1000_steps": ("cost", "gpu_hours_per_1000_steps"),
    "busy": ("utilisation", "busy"),
    "communication": ("utilisation", "communication"),
    "memory": ("utilisation", "memory"),
    "idle": ("utilisation", "idle"),
    "mfu": ("mfu", "overall"),
    "gen_s": ("stages_s", "gen"),
    "bubble_s": ("long_tail", "bubble_s_mean"),
    "staleness_mean": ("staleness", "mean"),
}


def headline(metrics: dict) -> dict[str, Any]:
    values = {}
    for column, keys in HEADLINE.items():
        value: Any = metrics
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        values[column] = value
    return values


def axis_value(overrides: dict[str, Any], resolved: dict, path: str) -> Any:
    """The value the point gave a dotted path as written (`model: Qwen2.5-7B`), else its resolved value (a default,
    or a field a case left alone); a mapping or list as compact JSON, so every cell is a scalar."""
    written = overrides.get(path)
    if written is not None and not isinstance(written, (dict, list)):
        return written
    value: Any = resolved
    for part in parse_path(path):
        if isinstance(value, dict) and isinstance(part, str):
            value = value.get(part)
        elif isinstance(value, list) and isinstance(part, int) and -len(value) <= part < len(value):
            value = value[part]
        else:
            return None
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def columns(axis_paths: Sequence[str]) -> list[str]:
    return ["point", "status", *axis_paths, *HEADLINE, "error"]


def csv_text(rows: Sequence[dict], names: Sequence[str]) -> str:
    """CSV with floats written by repr, so they read back bit for bit; empty cells for missing values."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow(["" if row.get(n) is None else repr(row[n]) if isinstance(row[n], float) else row[n]
                         for n in names])
    return buffer.getvalue()


def parquet_bytes(rows: Sequence[dict], names: Sequence[str]) -> bytes:
    """The table as Parquet. A column whose cells mix types (an axis set to 2 in one case and "auto" in another) is
    stored as text, since Parquet columns have one type."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = {}
    for name in names:
        cells = [row.get(name) for row in rows]
        kinds = {type(c) for c in cells if c is not None}
        if kinds == {int, float}:
            cells = [None if c is None else float(c) for c in cells]
        elif len(kinds) > 1:
            cells = [None if c is None else str(c) for c in cells]
        data[name] = pa.array(cells, type=pa.string() if not kinds else None)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(data), sink)
    return sink.getvalue().to_pybytes()


# Columns that are always text: a point id is hex digits and may read as a number ("24e1133996961176" is a float).
TEXT_COLUMNS = ("point", "status")


def read_csv_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a results.csv, with numbers as numbers (for the report and notebooks without pandas)."""
    with path.open(newline="") as handle:
        return [{k: (v if k in TEXT_COLUMNS else _parse_cell(v)) for k, v in row.items()}
                for row in csv.DictReader(handle)]


def _parse_cell(text: str) -> Any:
    if text == "":
        return None
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)
