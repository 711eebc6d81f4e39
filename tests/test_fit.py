"""`rlsim fit`: known framework parameters fitted back from a log rlsim wrote, and the overlay `--calibration` reads."""
from __future__ import annotations

import pytest
import yaml

from rlsim.cli import main
from rlsim.cli.overrides import calibration_overrides
from rlsim.errors import ScenarioError
from tests.test_replay import console_lines, drift_scenario, known_run, verl_metrics

KNOWN = {"training_kernel_efficiency": 0.6, "engine_step_cpu_s": 0.003}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A log written by a run with known non-default parameters, and the same scenario at the defaults."""
    folder = tmp_path_factory.mktemp("fit")
    framework = ", ".join(f"{k}: {v}" for k, v in KNOWN.items())
    (folder / "run.log").write_text(console_lines(verl_metrics(known_run(drift_scenario(steps=5,
                                                                                      framework=framework)))))
    (folder / "s.yaml").write_text(drift_scenario(steps=5))
    return folder


def test_fit_recovers_known_parameters_within_5_percent_and_reports_held_out_error(synthetic, capsys):
    out = synthetic / "run-fit.yaml"
    assert main(["fit", str(synthetic / "run.log"), "--scenario", str(synthetic / "s.yaml"), "--out", str(out),
                 "--held-out", "1"]) == 0
    printed = capsys.readouterr().out
    assert "held-out steps (1): mean |error|" in printed
    overlay = yaml.safe_load(out.read_text())
    for field, value in KNOWN.items():
        assert overlay["framework"][field] == pytest.approx(value, rel=0.05)
    header = out.read_text().split("framework:")[0]
    assert "fitted to the stage times of" in header and "held-out" in header and "±" in header


def test_run_reads_the_overlay_and_set_still_wins(synthetic, capsys):
    overlay = synthetic / "overlay.yaml"
    overlay.write_text("# fitted\nframework:\n  engine_step_cpu_s: 0.003\n")
    assert calibration_overrides(overlay) == {"framework.engine_step_cpu_s": 0.003}
    assert main(["run", str(synthetic / "s.yaml"), "--calibration", str(overlay), "--steps", "1",
                 "--out", str(synthetic / "run"), "--set", "framework.engine_step_cpu_s=0.004"]) == 0
    resolved = yaml.safe_load((synthetic / "run" / "resolved.yaml").read_text())
    assert resolved["framework"]["engine_step_cpu_s"] == 0.004


@pytest.mark.parametrize(("text", "line", "says"), [
    ("framework:\n  engine_step_cpu: 0.003\n", 2, "unknown field 'engine_step_cpu'"),
    ("model: Qwen2.5-7B\n", 1, "expected a calibration overlay"),
])
def test_a_bad_overlay_names_its_file_and_line(tmp_path, text, line, says):
    overlay = tmp_path / "fit.yaml"
    overlay.write_text(text)
    with pytest.raises(ScenarioError) as caught:
        calibration_overrides(overlay)
    assert caught.value.file == str(overlay) and caught.value.line == line and says in caught.value.first.message
