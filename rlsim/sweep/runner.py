"""Run a sweep into a folder: expand it, skip points already written (resume), run the rest on an executor, write
each point as it finishes, then the results table and the report."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rlsim.errors import Problem, ScenarioError
from rlsim.progress import Progress
from rlsim.sweep.compute import PointTask, blank_row
from rlsim.sweep.executors import EXECUTORS
from rlsim.sweep.points import Expansion, expand
from rlsim.sweep.spec import SweepSpec, load_sweep
from rlsim.sweep.store import SweepStore
from rlsim.sweep.table import columns, csv_text, parquet_bytes


@dataclass(frozen=True)
class SweepRun:
    out: Path
    expansion: Expansion
    rows: tuple[dict, ...]  # the results table, in the sweep's order
    ran: int  # points run by this call (the others were already written)
    columns: tuple[str, ...]

    def count(self, status: str) -> int:
        return sum(1 for row in self.rows if row["status"] == status)

    @property
    def table(self):
        """The results table: a pandas DataFrame when pandas is installed, else the rows (a list of dicts)."""
        try:
            import pandas
        except ImportError:
            return list(self.rows)
        return pandas.DataFrame.from_records(list(self.rows), columns=list(self.columns))

    def figure(self, name: str = "pareto"):
        """"pareto" (step time against cost, the Pareto front marked), or an axis path: its effect on step time."""
        from rlsim.report.sweep_report import effect_figure, pareto_figure

        if name == "pareto":
            return pareto_figure(self.rows)
        if name in self.expansion.spec.axis_paths:
            return effect_figure(self.rows, name, self.expansion.spec.axis_paths)
        raise KeyError(f"no figure named {name!r}; figures: pareto, {', '.join(self.expansion.spec.axis_paths)}")


def run_sweep(sweep: SweepSpec | str | Path, out: str | Path, *, workers: int = 1, executor: str = "local",
              resume: bool = False, address: str | None = None, full_run_folders: bool = False,
              progress: TextIO | None = None, report: bool = True) -> SweepRun:
    """Run every point not yet written in `out` (all of them unless `resume`); points that failed before are retried.
    Returns the results table; writes results.csv, results.parquet, points.json and (with `report`) report.html."""
    if executor not in EXECUTORS:
        raise ScenarioError(Problem(f"unknown executor {executor!r}", file="rlsim sweep --executor",
                                    valid=", ".join(EXECUTORS)))
    if workers < 1:
        raise ScenarioError(Problem(f"--workers must be at least 1, got {workers}", file="rlsim sweep --workers"))
    spec = sweep if isinstance(sweep, SweepSpec) else load_sweep(sweep)
    expansion = expand(spec)
    store = SweepStore(Path(out))
    store.open(resume=resume)
    store.write("points.json", json.dumps(_manifest(expansion), indent=1, default=str) + "\n")
    names = tuple(columns(spec.axis_paths))
    finished = store.finished_rows()
    rows: dict[str, dict] = {}
    for point in expansion.points:
        row = finished.get(point.id)
        if row is not None and row["status"] != "failed":
            # Axis columns follow the sweep file as it is now: a resumed sweep may have gained an axis.
            axes = blank_row(point, spec.axis_paths)
            rows[point.id] = {**row, **{path: axes[path] for path in spec.axis_paths}}
    tasks = [PointTask(point, spec.axis_paths, full_run_folders) for point in expansion.points if point.id not in rows]
    with Progress(len(tasks), "points", progress) as bar:
        for outcome in EXECUTORS[executor](tasks, workers, address):
            store.write_point(outcome.id, outcome.files, outcome.row)
            rows[outcome.id] = outcome.row
            bar.advance(outcome.row["status"])
    table = tuple(rows[point.id] for point in expansion.points)
    store.write("results.csv", csv_text(table, names))
    store.write("results.parquet", parquet_bytes(table, names))
    result = SweepRun(Path(out), expansion, table, len(tasks), names)
    if report:
        from rlsim.report.sweep_report import sweep_report_html

        store.write("report.html", sweep_report_html(result))
    return result


def _manifest(expansion: Expansion) -> dict:
    spec = expansion.spec
    return {"sweep": spec.name, "file": spec.file, "axes": list(spec.axis_paths), "skipped": expansion.skipped,
            "duplicates": expansion.duplicates,
            "points": [{"point": p.id, "overrides": p.overrides} for p in expansion.points]}
