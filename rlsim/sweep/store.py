"""The sweep's output folder. Every write goes to a temporary name first and is renamed into place (os.replace), so a
sweep killed at any instant leaves each point either complete or absent, never half-written.

    OUT/points/<id>/          one run folder per point (metrics.json, resolved.yaml, events, ...) and row.json
    OUT/points/.partial-*     a point being written; removed when the sweep starts again
    OUT/results.csv|.parquet  the results table, in the sweep's order
    OUT/points.json           the expansion: every point's id and overrides, skipped and duplicate counts
    OUT/report.html           the sweep report
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from rlsim.errors import Problem, ScenarioError

ROW_FILE = "row.json"
PARTIAL = ".partial-"


def write_atomic(path: Path, content: bytes | str) -> None:
    data = content.encode() if isinstance(content, str) else content
    temporary = path.with_name(f"{PARTIAL}{path.name}.{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


class SweepStore:
    def __init__(self, out: Path):
        self.out = out
        self.points = out / "points"

    def open(self, *, resume: bool) -> None:
        """Create the folder; refuse to mix a new sweep into finished points unless resuming; clear partial writes."""
        if self.points.is_dir() and any(not p.name.startswith(PARTIAL)
                                        for p in self.points.iterdir()) and not resume:
            raise ScenarioError(Problem(f"{self.out} already holds points of a sweep", file="rlsim sweep --out",
                                        valid="--resume to continue it, or another --out folder"))
        self.points.mkdir(parents=True, exist_ok=True)
        for leftover in [*self.points.glob(f"{PARTIAL}*"), *self.out.glob(f"{PARTIAL}*")]:
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()

    def finished_rows(self) -> dict[str, dict]:
        """Rows of the points already written, by id."""
        rows = {}
        for row_file in self.points.glob(f"*/{ROW_FILE}"):
            rows[row_file.parent.name] = json.loads(row_file.read_text())
        return rows

    def write_point(self, point_id: str, files: dict[str, bytes], row: dict) -> None:
        """The point's folder appears whole, with its row, in one rename."""
        temporary = self.points / f"{PARTIAL}{point_id}.{os.getpid()}"
        if temporary.exists():
            shutil.rmtree(temporary)
        temporary.mkdir()
        for name, content in files.items():
            (temporary / name).write_bytes(content)
        (temporary / ROW_FILE).write_text(json.dumps(row, indent=1, sort_keys=True) + "\n")
        final = self.points / point_id
        if final.exists():  # a failed point being retried; until the rename below the point counts as not run
            shutil.rmtree(final)
        os.replace(temporary, final)

    def write(self, name: str, content: bytes | str) -> Path:
        path = self.out / name
        write_atomic(path, content)
        return path
