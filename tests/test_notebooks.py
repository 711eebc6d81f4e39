"""The notebooks run top to bottom in a real kernel, and are committed without outputs."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

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
    printed = "".join(o.get("text", "") for o in produced if o.output_type == "stream")
    assert "colocated 8" in printed and "disaggregated 6+2" in printed
