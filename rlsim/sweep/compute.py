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
from rlsim.costs.memory import memory_report
from rlsim.errors import InfeasibleError
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


def compute_point(task: PointTask) -> PointOutcome:
    point = task.point
    resolved = point.scenario.model_dump(mode="json")
    row: dict[str, Any] = {"point": point.id, "status": "ok",
                           **{path: axis_value(point.overrides, resolved, path) for path in task.axis_paths},
                           **dict.fromkeys(HEADLINE), "error": None}
    files = {"resolved.yaml": yaml.safe_dump(resolved, sort_keys=False).encode()}
    try:
        _require_memory(point)
        from rlsim.api import simulate  # the simulator loads only in processes that simulate

        result = simulate(point.scenario)
    except InfeasibleError as exc:
        row.update(status="infeasible", error=str(exc))
        return PointOutcome(point.id, point.index, row, files)
    except Exception as exc:  # a point that fails is recorded and the sweep goes on
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        files["error.txt"] = traceback.format_exc().encode()
        return PointOutcome(point.id, point.index, row, files)
    row.update(headline(result.metrics))
    files.update(_run_folder(result, task.full_run_folder))
    return PointOutcome(point.id, point.index, row, files)


def _require_memory(point: Point) -> None:
    """Raise InfeasibleError for the first role whose per-GPU memory does not fit, as `rlsim check` judges it."""
    bound = bind(point.scenario)
    gpus = {name: hardware.gpu for name, hardware in bound.pools.items()}
    for role in memory_report(point.scenario, bound.model, gpus):
        role.require()


def _run_folder(result, full: bool) -> dict[str, bytes]:
    """The run folder `rlsim run` writes; without `full`, everything except report.html and trace.json."""
    from rlsim.report.event_files import write_event_files
    from rlsim.report.run_folder import metrics_json

    with tempfile.TemporaryDirectory(prefix="rlsim-point-") as folder:
        out = Path(folder)
        if full:
            result.save(out)
        else:
            (out / "metrics.json").write_text(metrics_json(result.metrics))
            (out / "timing.json").write_text(json.dumps({"host_seconds": result.host_seconds}) + "\n")
            write_event_files(result.log, out)
        return {path.name: path.read_bytes() for path in sorted(out.iterdir()) if path.name != "resolved.yaml"}
