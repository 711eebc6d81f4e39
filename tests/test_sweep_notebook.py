"""notebooks/02_capacity_planning.ipynb runs top to bottom: a sweep with its table and figures, a comparison of two
points, and a plan with its explanation."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_capacity_planning_notebook_runs_top_to_bottom():
    notebook = nbformat.read(NOTEBOOKS / "02_capacity_planning.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    produced = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in produced if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in produced if o.output_type == "stream")
    assert "14 points over" in printed and "4 duplicates" in printed
    assert re.search(r"rank +candidate", printed) and "beats the runner-up" in printed
    html = [o["data"]["text/html"] for o in produced if "text/html" in o.get("data", {})]
    assert any("step_time_s" in h for h in html)  # the results table
    assert any('id="differences"' in h and "colocated" in h for h in html)  # the comparison of two points
    figures = [o for o in produced if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 3  # Pareto front, effect of the rollout GPUs, the plan's GPU-time
