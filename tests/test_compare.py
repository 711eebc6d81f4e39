"""`rlsim compare`: runs side by side, the figures that moved most first, as text and HTML."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.events import LABELS, STAGES
from rlsim.report.compare import NamedMetrics, compare_text, differences
from tests.sim_scenarios import scenario_yaml


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The same job colocated and disaggregated."""
    root = tmp_path_factory.mktemp("compare")
    folders = []
    for name, kwargs in (("colocated", {}), ("disaggregated", dict(mode="disaggregated", rollout_gpus=6,
                                                                     training_gpus=2, schedule="one_step_off"))):
        scenario = root / f"{name}.yaml"
        scenario.write_text(scenario_yaml(steps=3, **kwargs))
        assert main(["run", str(scenario), "--out", str(root / name), "--json"]) == 0
        folders.append(root / name)
    return folders[0], folders[1]


def test_compare_prints_runs_side_by_side_largest_change_first(two_runs, tmp_path, capsys):
    capsys.readouterr()
    out_file = tmp_path / "cmp.html"
    assert main(["compare", str(two_runs[0]), str(two_runs[1]), "--out", str(out_file)]) == 0
    text = capsys.readouterr().out
    measured, header, rule, *lines = text.splitlines()
    assert measured.startswith("measured over: ") and "warm-up" in measured  # which steps each run averages
    assert "colocated" in header and "disaggregated" in header and set(rule) == {"─"}
    runs = [NamedMetrics(p.name, json.loads((p / "metrics.json").read_text())) for p in two_runs]
    ordered = differences(runs)
    assert [d.largest for d in ordered] == sorted((d.largest for d in ordered), reverse=True)
    assert lines[0].startswith(ordered[0].headline.title)
    assert "share of GPU-time" in text and "stage mean (s)" in text
    page = out_file.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="differences"' in page and 'id="fig-shares"' in page


def test_changes_are_relative_except_for_fractions_which_move_in_points():
    base = {"step_time_s": {"mean": 10.0}, "utilisation": {"idle": 0.05}, "throughput": {"tokens_per_s": 100.0}}
    other = copy.deepcopy(base)
    other["step_time_s"]["mean"] = 12.0
    other["utilisation"]["idle"] = 0.45
    other["throughput"]["tokens_per_s"] = 100.0
    rows = {d.headline.path: d for d in differences([NamedMetrics("a", base), NamedMetrics("b", other)])}
    step, idle, tokens = rows["step_time_s", "mean"], rows["utilisation", "idle"], rows["throughput", "tokens_per_s"]
    assert step.change[1] == pytest.approx(0.2) and step.verdict(1) == "worse" and step.change_text(1) == "+20.0%"
    assert idle.change[1] == pytest.approx(0.4) and idle.change_text(1) == "+40.0 pts" and idle.verdict(1) == "worse"
    assert tokens.change[1] == 0.0 and tokens.verdict(1) == ""
    assert rows["mfu", "overall"].values == (None, None)  # absent figures compare as n/a
    order = [d.headline.path for d in differences([NamedMetrics("a", base), NamedMetrics("b", other)])]
    assert order.index(("utilisation", "idle")) < order.index(("step_time_s", "mean"))


def test_compare_text_names_every_run():
    metrics: dict = {"step_time_s": {"mean": 1.0, "p50": 1.0, "max": 1.0}}
    metrics["gpu_seconds_by_label"] = {label: 1.0 if label == "decode" else 0.0 for label in LABELS}
    metrics["stages_s"] = {stage: 1.0 if stage == "gen" else 0.0 for stage in STAGES}
    text = compare_text([NamedMetrics("first", metrics), NamedMetrics("second", metrics), NamedMetrics("third", metrics)])
    assert all(name in text.splitlines()[0] for name in ("first", "second", "third"))


def test_compare_rejects_a_folder_without_metrics_without_a_traceback(two_runs, tmp_path):
    result = subprocess.run([sys.executable, "-m", "rlsim", "compare", str(two_runs[0]), str(tmp_path),
                             "--out", str(tmp_path / "x.html")], capture_output=True, text=True)
    assert result.returncode == 2
    assert "not a run folder" in result.stderr and "Traceback" not in result.stderr


def test_compare_needs_two_runs(two_runs, capsys):
    assert main(["compare", str(two_runs[0])]) == 2
    assert "at least two" in capsys.readouterr().err


@pytest.mark.parametrize("content", ['{"a": 1}', "[1, 2]", '{"gpu_seconds_by_label": {}, "stages_s": {"gen": 1}}'])
def test_compare_refuses_a_metrics_json_from_elsewhere_naming_it(two_runs, tmp_path, capsys, content):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "metrics.json").write_text(content)
    assert main(["compare", str(two_runs[0]), str(foreign)]) == 2
    err = capsys.readouterr().err
    assert str(foreign / "metrics.json") in err and "not an rlsim run's metrics" in err and "Traceback" not in err
