"""Everything `rlsim run` leaves in a run folder, written in one place so the CLI and the Python API agree."""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path

import yaml

from rlsim.compiled_engine import engine_build
from rlsim.config.schema import Scenario
from rlsim.report.event_files import event_tables, write_event_files
from rlsim.report.figures import RunData
from rlsim.report.html import run_report_html
from rlsim.report.trace import write_trace


def metrics_json(metrics: dict) -> str:
    """Strict JSON: a figure with no finite value (a rate over no time) is written as null, never as NaN or
    Infinity, which JSON has no words for and strict readers refuse."""
    return json.dumps(_finite_or_null(metrics), indent=2, sort_keys=True, allow_nan=False) + "\n"


def _finite_or_null(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(item) for item in value]
    return value


def write_run_folder(out: Path, scenario: Scenario, data: RunData, host_seconds: float,
                     events: str = "auto") -> list[Path]:
    """resolved.yaml, metrics.json, timing.json (host time, the only file that varies between identical runs), the
    event tables and trace.json that `events` asks for (EVENT_CHOICES) and report.html. Returns the paths written.

    The files are written into a sibling folder first and moved into place once complete, so an interrupted write
    leaves the previous run folder (if any) as it was, never a half-written one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not tempfile.mkdtemp: the folder keeps the user's umask instead of mkdtemp's owner-only mode.
    staging = out.parent / f".{out.name[:50]}.{os.getpid()}.{time.monotonic_ns()}.partial"
    staging.mkdir()
    try:
        written = _write_files(staging, scenario, data, host_seconds, event_tables(events, data.log))
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / path.relative_to(staging) for path in written]


def _replace_folder(new: Path, out: Path) -> None:
    """Move `new` to `out`; an existing `out` is set aside first and removed only once `new` is in place."""
    if not out.exists():
        new.rename(out)
        return
    old = out.parent / f".{out.name[:50]}.{os.getpid()}.old"
    out.rename(old)
    new.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def _write_files(out: Path, scenario: Scenario, data: RunData, host_seconds: float, tables: str) -> list[Path]:
    written = [out / "resolved.yaml", out / "metrics.json", out / "timing.json"]
    written[0].write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    written[1].write_text(metrics_json(data.metrics))
    events = data.log.events
    # How the engine ran (compiled or interpreted) explains host time; it never changes metrics.json.
    timing = {"host_seconds": host_seconds, "events": events,
              "events_per_second": events / host_seconds if host_seconds else 0.0, "engine": engine_build()}
    written[2].write_text(json.dumps(_finite_or_null(timing), indent=2, allow_nan=False) + "\n")
    if tables != "none":
        written += write_event_files(data.log, out, tables)
    if tables == "full":
        write_trace(data.log, data.facts, out / "trace.json")
        written.append(out / "trace.json")
    (out / "report.html").write_text(run_report_html(data, scenario))
    return written + [out / "report.html"]
