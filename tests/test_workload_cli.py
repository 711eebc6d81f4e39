"""`rlsim workload fit` and `rlsim workload show` as a user runs them, and `rlsim estimate` on the new workloads."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlsim.cli import main
from rlsim.config import load_scenario
from rlsim.config.bound import bind
from rlsim.config.workload import Workload
from rlsim.estimate import estimate_step

ROOT = Path(__file__).parents[1]
TRACES = ROOT / "traces" / "polytrace"


def test_fit_writes_a_workload_that_loads_and_reports_the_comparison(tmp_path, capsys):
    out = tmp_path / "dapo.yaml"
    assert main(["workload", "fit", str(TRACES / "verl_dapo_qwen2.5_32b" / "dapo_filter_indices.jsonl"),
                 "--out", str(out)]) == 0
    assert Workload.model_validate({**yaml.safe_load(out.read_text()), "prompt_tokens": {"kind": "fixed", "tokens": 1},
                                    "response_tokens": {"kind": "fixed", "tokens": 1}}).informative_group_fraction > 0.3
    assert main(["workload", "fit", str(TRACES / "enhanced_task_distribution_parameters.json"), "--out",
                 str(tmp_path / "joint.yaml")]) == 0
    assert "joint_tokens" in yaml.safe_load((tmp_path / "joint.yaml").read_text())


def test_show_prints_statistics_and_writes_a_self_contained_histogram(tmp_path, capsys):
    spec = tmp_path / "model.yaml"
    spec.write_text("kind: lognormal\nmedian_tokens: 1000\nsigma: 1.0\n")
    html = tmp_path / "lengths.html"
    assert main(["workload", "show", str(spec), "--max-response-tokens", "4096", "--html", str(html)]) == 0
    out = capsys.readouterr().out
    for word in ("mean", "p50", "p90", "p99", "max", "truncated", "response"):
        assert word in out
    # P(lognormal(1000, 1) ≥ 4096) = 8 %: the truncated share is reported.
    response_row = next(line for line in out.splitlines() if line.startswith("response"))
    assert 7.0 < float(response_row.split()[-1].rstrip("%")) < 9.5
    page = html.read_text()
    assert "Plotly.newPlot" in page and "response-histogram" in page and "<script src=" not in page


def test_show_reads_scenarios_and_fitted_workloads(tmp_path, capsys):
    assert main(["workload", "show", str(TRACES / "fitted" / "search_r1_qwen2.5_7b.yaml"), "--groups", "200",
                 "--max-response-tokens", "3000", "--html", str(tmp_path / "a.html")]) == 0
    assert "turns per trajectory" in capsys.readouterr().out
    assert main(["workload", "show", str(ROOT / "scenarios" / "quickstart.yaml"), "--groups", "100",
                 "--html", str(tmp_path / "b.html")]) == 0


def test_show_names_a_model_length_and_draws_under_it(tmp_path, capsys):
    scenario = ROOT / "scenarios" / "validation" / "v3-nemo-rl-grpo-on-policy-h100.yaml"
    assert main(["workload", "show", str(scenario), "--groups", "300", "--html", str(tmp_path / "v3.html")]) == 0
    out = capsys.readouterr().out
    assert "responses capped at 4096, prompt + response at 4096" in out
    response_max = float(next(line for line in out.splitlines() if line.startswith("response")).split()[5])
    assert response_max <= 4096 - 1  # every prompt has at least one token, so no response reaches 4,096


def test_bad_input_exits_2_naming_the_field(tmp_path, capsys):
    spec = tmp_path / "model.yaml"
    spec.write_text("kind: lognormal\nmedian_tokens: 1000\nsigma: -1.0\n")
    assert main(["workload", "show", str(spec)]) == 2
    assert "sigma" in capsys.readouterr().err
    assert main(["workload", "fit", str(tmp_path / "missing"), "--out", str(tmp_path / "x.yaml")]) == 2


@pytest.mark.parametrize("name", ["search-r1-qwen2.5-7b-multiturn.yaml", "dapo-qwen2.5-32b-replay.yaml",
                                  "production-math-joint-judge.yaml"])
def test_workload_scenarios_estimate_and_check(name, capsys):
    path = ROOT / "scenarios" / name
    result = estimate_step(bind(load_scenario(path)))
    assert result.step_s > 0 and result.stage("gen") > 0
    assert main(["check", str(path)]) == 0
