"""Run one sweep point wherever an executor sends it: check memory, simulate, and hand back its row and the files of
its run folder as bytes. Nothing is written to the sweep folder here, so a Ray worker on another machine needs no
shared filesystem and the driver stays the only writer."""
from __future__ import annotations

import json
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlsim.config.bound import bind
from rlsim.errors import InfeasibleError
from rlsim.pricing.memory import memory_report
from rlsim.sweep.points import Point
from rlsim.sweep.table import HEADLINE, axis_value, headline


@dataclass(frozen=True)
class PointTask:
    point: Point
    axis_paths: tuple[str, ...]
    full_run_folder: bool  # also write report.html and trace.json (≈5 MB and ≈1 s per point)


@dataclass(frozen=True)
class PointOutcome:
    id: str
    index: int
    row: dict[str, Any]
    files: dict[str, bytes]


def blank_row(point: Point, axis_paths: tuple[str, ...]) -> dict[str, Any]:
    """A point's row before it has run: its id and axis values, no metrics."""
    resolved = point.scenario.model_dump(mode="json")
    return {"point": point.id, "status": "ok", **{path: axis_value(point.overrides, resolved, path) for path in axis_paths},
            **dict.fromkeys(HEADLINE), "error": None}


def failed_outcome(task: PointTask, error: str, details: str) -> PointOutcome:
    """The outcome of a point whose run raised or whose worker died: the row holds the error, error.txt the details."""
    row = {**blank_row(task.point, task.axis_paths), "status": "failed", "error": error}
    files = {"resolved.yaml": _resolved_yaml(task.point), "error.txt": details.encode()}
    return PointOutcome(task.point.id, task.point.index, row, files)


def _resolved_yaml(point: Point) -> bytes:
    return yaml.safe_dump(point.scenario.model_dump(mode="json"), sort_keys=False).encode()


def compute_point(task: PointTask) -> PointOutcome:
    point = task.point
    row = blank_row(point, task.axis_paths)
    files = {"resolved.yaml": _resolved_yaml(point)}
    try:
        _require_memory(point)
        from rlsim.api import simulate  # the simulator loads only in processes that simulate

        result = simulate(point.scenario)
    except InfeasibleError as exc:
        row.update(status="infeasible", error=str(exc))
        return PointOutcome(point.id, point.index, row, files)
    except Exception as exc:  # a point that fails is recorded and the sweep goes on
        return failed_outcome(task, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    row.update(headline(result.metrics))
    files.update(_run_folder(result, task.full_run_folder))
    return PointOutcome(point.id, point.index, row, files)


def _require_memory(point: Point) -> None:
    """Raise InfeasibleError for the first role whose per-GPU memory does not fit, as `rlsim check` judges it."""
    bound = bind(point.scenario)
    gpus = {name: hardware.gpu for name, hardware in bound.pools.items()}
    for role in memory_report(point.scenario, bound.model, gpus, bound.reward_model):
        role.require()


def _run_folder(result, full: bool) -> dict[str, bytes]:
    """The run folder `rlsim run` writes; without `full`, everything except report.html and trace.json."""
    from rlsim.compiled_engine import engine_build
    from rlsim.report.event_files import write_event_files
    from rlsim.report.run_folder import metrics_json

    with tempfile.TemporaryDirectory(prefix="rlsim-point-") as folder:
        out = Path(folder)
        if full:
            result.save(out)
        else:
            (out / "metrics.json").write_text(metrics_json(result.metrics))
            timing = {"host_seconds": result.host_seconds, "engine": engine_build()}
            (out / "timing.json").write_text(json.dumps(timing) + "\n")
            write_event_files(result.log, out)
        return {path.name: path.read_bytes() for path in sorted(out.iterdir()) if path.name != "resolved.yaml"}
