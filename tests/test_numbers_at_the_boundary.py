"""Issue 35, numbers at the boundary: every float an input gives is finite unless its field says .inf means something
(then it is resolved to a finite bound before anything runs), and what rlsim writes is strict JSON."""
import json
import math

import pytest

import rlsim
from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.report.run_folder import metrics_json
from tests.sim_scenarios import scenario_yaml

QUICKSTART = "scenarios/quickstart.yaml"
# Float fields of every kind of bound: positive, non-negative, a fraction, bounded on both sides, a rate.
FLOAT_FIELDS = ("placement.rollout.gpu_memory_utilization", "framework.pageable_copy_out_bytes_per_s",
                "framework.trainer_step_overhead_s", "framework.engine_step_cpu_s", "workload.step_length_sigma",
                "framework.training_kernel_efficiency", "framework.driver_batch_bytes_per_s")


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_a_non_finite_number_is_refused_at_its_field(field, value, capsys):
    assert main(["check", QUICKSTART, "--set", f"{field}={value}"]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_a_length_model_refuses_non_finite_parameters(capsys):
    assert main(["check", QUICKSTART, "--set", "workload.response_tokens.sigma=.nan"]) == 2
    assert "workload.response_tokens" in capsys.readouterr().err


def test_unbounded_staleness_is_the_runs_own_steps_and_runs():
    """`max_staleness: .inf` says "unbounded" (AReaL's η = ∞): it resolves to the run's steps, past which a bound
    changes nothing, so the producer never admits more batches than the run has (a bound of 10^6 likewise)."""
    for staleness in (".inf", "1000000"):
        scenario = parse_scenario(scenario_yaml(schedule="async", staleness=staleness, steps=3, prompts=4, samples=2,
                                                mode="disaggregated", rollout_gpus=4, training_gpus=4))
        assert scenario.schedule.max_staleness == 3.0
        assert math.isfinite(rlsim.simulate(scenario).metrics["step_time_s"]["mean"])
    bound = parse_scenario(scenario_yaml(schedule="async", staleness="2", steps=5, mode="disaggregated",
                                         rollout_gpus=4, training_gpus=4))
    assert bound.schedule.max_staleness == 2.0  # a bound inside the run is kept as written
    assert bind(bound).run.steps == 5


def test_metrics_json_is_strict_json_with_null_for_figures_without_a_finite_value():
    text = metrics_json({"rate": math.inf, "nested": {"ratio": math.nan, "ok": 1.5}, "series": [1.0, -math.inf]})
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}")) == {
        "rate": None, "nested": {"ratio": None, "ok": 1.5}, "series": [1.0, None]}


def test_a_run_writes_strict_json(tmp_path):
    assert main(["run", QUICKSTART, "--steps", "1", "--out", str(tmp_path / "run")]) == 0
    def refuse(constant: str) -> None:
        pytest.fail(f"non-strict JSON constant {constant}")

    for name in ("metrics.json", "timing.json"):
        json.loads((tmp_path / "run" / name).read_text(), parse_constant=refuse)
