"""The notebook API: load, change, simulate, look, compare — with and without pandas."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas
import plotly.graph_objects as go
import pytest

import rlsim
from rlsim.config import parse_scenario
from rlsim.events import LABELS, STAGES
from tests.sim_scenarios import scenario_yaml

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ["Comparison", "MeasuredWindowWarning", "Result", "Scenario", "ScenarioError", "__version__", "compare",
          "load_scenario", "simulate", "with_"]


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("api") / "small.yaml"
    path.write_text(scenario_yaml(steps=2))
    return path


@pytest.fixture(scope="module")
def result(scenario_file):
    return rlsim.simulate(rlsim.load_scenario(scenario_file))


def test_public_names_are_pinned():
    assert rlsim.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(rlsim, name) is not None
    with pytest.raises(AttributeError):
        rlsim.not_a_name  # noqa: B018


def test_with_changes_a_field_and_its_derived_defaults(scenario_file):
    base = rlsim.load_scenario(scenario_file)
    assert base.placement.training.gpus == 8
    smaller = rlsim.with_(base, **{"placement.rollout.gpus": 4})
    assert smaller.placement.rollout.gpus == 4
    assert smaller.placement.training.gpus == 4  # colocated: training follows the rollout GPUs
    assert smaller.placement.training.dp == 4
    again = rlsim.with_(smaller, {"run.steps": 5})  # changes accumulate on the scenario's own document
    assert again.run.steps == 5 and again.placement.rollout.gpus == 4
    assert base.placement.rollout.gpus == 8  # the original is untouched (frozen)
    other_model = rlsim.with_(base, model="Qwen2.5-1.5B")
    assert other_model.model.architecture != base.model.architecture  # the new model brings its own architecture


def test_with_reports_bad_values_like_the_cli(scenario_file):
    base = rlsim.load_scenario(scenario_file)
    with pytest.raises(rlsim.ScenarioError) as err:
        rlsim.with_(base, **{"placement.rollout.gpus": -1})
    assert "placement.rollout.gpus" in str(err.value) and "--set" in str(err.value)


def test_with_accepts_a_scenario_built_another_way():
    scenario = parse_scenario(scenario_yaml(steps=2))
    assert rlsim.with_(scenario, **{"run.steps": 3}).run.steps == 3


def test_result_has_metrics_tables_and_figures(result):
    assert result.metrics["step_time_s"]["mean"] > 0
    assert set(result.metrics["gpu_seconds_by_label"]) == set(LABELS)
    steps = result.steps
    assert isinstance(steps, pandas.DataFrame) and list(steps["step"]) == [0, 1]
    assert set(STAGES) <= set(steps.columns)
    gpus = result.gpus
    assert len(gpus) == 8
    assert (gpus[list(LABELS)].sum(axis=1) - result.log.wall_s).abs().max() < 1e-9  # labels sum to wall time
    assert result.pools["busy_fraction"].iloc[0] == pytest.approx(result.metrics["utilisation"]["busy"])
    assert len(result.sequences) == len(result.log.sequences)
    engines = result.engines
    assert len(engines) == result.scenario.placement.rollout.engines
    assert set(engines["engine"]) == {f"engine{e}" for e in range(len(engines))}
    assert result.figure_names == ("timeline", "gpu_time", "steps", "lengths", "engines", "staleness")
    for name in result.figure_names:
        assert isinstance(result.figure(name), go.Figure)
    with pytest.raises(KeyError, match="timeline"):
        result.figure("gantt")


def test_result_renders_in_a_notebook_and_as_text(result):
    html = result._repr_html_()
    assert "<table" in html and result.scenario.name in html and "plotly" not in html.lower()
    assert f'data-value="{result.metrics["step_time_s"]["mean"]!r}"' in html
    assert "mean step time" in result.summary() and "GPU-time:" in result.summary()
    assert repr(result).startswith(f"<Result {result.scenario.name}: steps 0–1 (no warm-up)")


def test_tables_are_plain_records_without_pandas(result, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` raise ImportError
    steps = result.steps
    assert isinstance(steps, list) and steps[0]["step"] == 0 and set(STAGES) <= set(steps[0])
    assert isinstance(result.gpus, list) and len(result.gpus) == 8


def test_save_writes_the_run_folder_of_rlsim_run(result, tmp_path):
    written = result.save(tmp_path / "run")
    assert {p.name for p in written} == {p.name for p in (tmp_path / "run").iterdir()}
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == json.loads(json.dumps(result.metrics))
    assert "report.html" in {p.name for p in written} and "trace.json" in {p.name for p in written}


def test_compare_results_and_run_folders(result, scenario_file, tmp_path):
    smaller = rlsim.simulate(rlsim.with_(rlsim.load_scenario(scenario_file), **{"placement.rollout.gpus": 4}))
    comparison = rlsim.compare(result, smaller, names=["8 GPUs", "4 GPUs"])
    assert comparison.names == ("8 GPUs", "4 GPUs")
    table = comparison.table
    assert list(table.columns) == ["figure", "8 GPUs", "4 GPUs", "change 4 GPUs"]
    step = table[table["figure"] == "mean step time"].iloc[0]
    assert step["8 GPUs"] == result.metrics["step_time_s"]["mean"]
    assert "8 GPUs" in comparison.text().splitlines()[0]
    assert 'id="differences"' in comparison._repr_html_() and comparison.html().startswith("<!DOCTYPE html>")
    assert isinstance(comparison.figure("shares"), go.Figure) and isinstance(comparison.figure("stages"), go.Figure)
    result.save(tmp_path / "a")
    smaller.save(tmp_path / "b")
    from_folders = rlsim.compare(tmp_path / "a", str(tmp_path / "b"))
    assert from_folders.names == ("a", "b") and from_folders.metrics[1] == json.loads(json.dumps(smaller.metrics))
    assert rlsim.compare(result, result).names == (f"{result.scenario.name} #1", f"{result.scenario.name} #2")
    with pytest.raises(ValueError):
        rlsim.compare(result)


def test_docs_list_every_public_name():
    text = (ROOT / "docs" / "api.md").read_text()
    for name in PUBLIC:
        if name != "__version__":
            assert f"`{name}" in text or f"rlsim.{name}" in text, name
