"""The notebooks run top to bottom in a real kernel, and are committed without outputs."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import rlsim
from rlsim.config.run_length import fill_steps

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def outputs(notebook) -> list[dict]:
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_quickstart_runs_top_to_bottom():
    notebook = nbformat.read(NOTEBOOKS / "01_quickstart.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    produced = outputs(notebook)
    assert not [o for o in produced if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in produced if "text/html" in o.get("data", {})]
    assert any("mean step time" in h and "quickstart" in h for h in html)  # a Result's rich view
    assert any('id="differences"' in h for h in html)  # the comparison's table
    figures = [o for o in produced if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 3  # timeline, GPU time, comparison shares
    # Each also carries HTML, so it shows when the notebook is exported (nbconvert) or viewed statically.
    assert all("text/html" in o["data"] for o in figures)
    printed = "".join(o.get("text", "") for o in produced if o.output_type == "stream")
    assert "colocated 8" in printed and "disaggregated 6+2" in printed
    assert "steps 2–4 of 0–4 (2 warm-up)" in printed  # the split is measured after its pipeline's fill
    winner, split_s = steady_state()
    assert f"faster in steady state: {winner}" in printed
    shown = float(re.search(r"disaggregated 6\+2 ([0-9.]+) s a step", printed).group(1))
    assert shown == pytest.approx(split_s, rel=0.01)


def steady_state() -> tuple[str, float]:
    """The notebook's comparison answered by runs measured after each pipeline's fill: the winner by long runs, and
    the split's step time over the same steps the notebook measures, with the warm-up set by hand."""
    base = rlsim.load_scenario(NOTEBOOKS.parent / "scenarios" / "quickstart.yaml")
    split = rlsim.with_(base, {"placement.mode": "disaggregated", "placement.rollout.gpus": 6,
                               "placement.training.gpus": 2, "schedule.mode": "one_step_off"})
    times = {}
    for name, scenario in (("colocated 8", base), ("disaggregated 6+2", split)):
        fill = fill_steps(scenario.schedule)
        long = rlsim.with_(scenario, {"run.steps": fill + 8, "run.warmup_steps": fill})
        times[name] = rlsim.simulate(long).metrics["step_time_s"]["mean"]
    fill = fill_steps(split.schedule)
    by_hand = rlsim.with_(split, {"run.steps": fill + 3, "run.warmup_steps": fill})
    return min(times, key=times.__getitem__), rlsim.simulate(by_hand).metrics["step_time_s"]["mean"]
