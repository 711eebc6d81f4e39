"""Issue 35, numbers at the boundary: every float an input gives is finite unless its field says .inf means something
(then it is resolved to a finite bound before anything runs), and what rlsim writes is strict JSON."""
import json
import math
from pathlib import Path

import pytest

import rlsim
from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.config.run_length import max_lead
from rlsim.estimate.step import estimate_step
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


def test_unbounded_staleness_runs_and_runs_ahead_no_further_than_the_run():
    """`max_staleness: .inf` says "unbounded" (AReaL's η = ∞): the scenario keeps it, the producer runs ahead by at most
    twice the run's steps (a bound of 10^6 likewise, where it used to admit a million batches at once), the estimate counts
    no more batches in flight than the run has. Three steps with two of warm-up measure inside the pipeline's fill,
    which the run says."""
    for staleness in (".inf", "1000000"):
        text = scenario_yaml(schedule="async", staleness=staleness, steps=3, prompts=4, samples=2,
                             mode="disaggregated", rollout_gpus=4, training_gpus=4)
        scenario = parse_scenario(text)
        assert scenario.schedule.max_staleness == float(staleness.replace(".inf", "inf"))
        with pytest.warns(rlsim.MeasuredWindowWarning, match="steady state only from step"):
            result = rlsim.simulate(scenario)
        assert math.isfinite(result.metrics["step_time_s"]["mean"])
        assert len({s.group for s in result.log.sequences}) <= (3 + max_lead(3) + 1) * 4
        assert math.isfinite(estimate_step(bind(scenario)).step_s)


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


@pytest.mark.parametrize(("field", "value"), [("algorithm.samples_per_prompt", 10**12), ("run.steps", 2**63),
                                              ("cluster.pools[0].nodes", 10**6),
                                              ("cluster.pools[0].gpus_per_node", 4096)])
def test_a_count_past_what_any_cluster_needs_is_refused_at_its_field(field, value, capsys):
    assert main(["check", QUICKSTART, "--set", f"{field}={value}"]) == 2
    err = capsys.readouterr().err
    assert field in err and "less than or equal" in err and "Traceback" not in err


def test_a_seed_may_be_any_64_bit_number():
    assert main(["check", QUICKSTART, "--set", "seed=12345678901234"]) == 0


@pytest.mark.parametrize("command", ["check", "estimate", "run"])
@pytest.mark.parametrize("change", ["run.steps=100000", "algorithm.prompts_per_step=10000000"])
def test_a_run_too_big_to_simulate_is_refused_before_it_starts_with_what_it_would_take(command, change, capsys):
    assert main([command, QUICKSTART, "--set", change]) == 2
    err = capsys.readouterr().err
    assert "run.max_rollouts" in err and " min and " in err and " GB to simulate" in err


def test_the_size_limit_is_the_users_to_raise():
    assert main(["check", QUICKSTART, "--set", "run.steps=5000", "--set", "run.max_rollouts=3000000"]) == 0


def test_estimate_refuses_a_layout_that_does_not_fit_as_run_does(capsys):
    """Found by the pipeline fuzz: unsharded training state (ZeRO 0) of a 14B model left the colocated engines a KV
    cache of 0 tokens, and `rlsim estimate` raised ValueError where `rlsim run` said what does not fit."""
    change = ["--set", "placement.training.zero_stage=0", "--set", "algorithm.prompts_per_step=16"]
    for command in ("estimate", "run"):
        assert main([command, "scenarios/deepcoder-14b-grpo-64xh100.yaml", *change]) == 3
        assert "does not fit in GPU memory" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value"), [("workload.prompt_tokens.sigma", "500"),
                                              ("workload.response_tokens.sigma", "11")])
def test_a_lognormal_spread_past_any_real_length_is_refused(field, value, capsys):
    """Found by the pipeline fuzz: σ = 500 passed the loader and overflowed the estimate's moments (NaN lengths)."""
    assert main(["check", QUICKSTART, "--set", f"{field}={value}"]) == 2
    assert field in capsys.readouterr().err


def test_a_joint_length_mixture_refuses_non_finite_means(capsys):
    """Found by the pipeline fuzz: an infinite mean in a joint prompt-response mixture crashed a rollout mid-run."""
    scenario = "scenarios/production-math-joint-judge.yaml"
    field = "workload.joint_tokens.components[0].mean_tokens"
    assert main(["check", scenario, "--set", f"{field}=[.inf, 4959.1]"]) == 2
    assert "finite" in capsys.readouterr().err


def test_a_hardware_profile_number_past_any_real_gpu_is_refused_at_its_line(tmp_path, capsys):
    """Found by the pipeline fuzz: peak_tflops 1e300 in a user's profile priced kernels at 0 s and made a step NaN."""
    text = Path("hardware_profiles/h100-sxm.yaml").read_text().replace("name: h100-sxm", "name: my-gpu", 1)
    text = text.replace("aliases: [h100, h100-sxm5, H100-SXM-80GB, h100-80gb]", "aliases: []", 1)
    (tmp_path / "my-gpu.yaml").write_text(text.replace("bf16: {value: 989,", "bf16: {value: 1.0e+300,", 1))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(Path(QUICKSTART).read_text().replace("gpu: h100-sxm", "gpu: my-gpu", 1)
                        + "\n# profiles\n")
    assert main(["check", str(scenario), "--set", f"cluster.profile_dirs=[{tmp_path}]"]) == 2
    err = capsys.readouterr().err
    assert "my-gpu.yaml" in err and "peak_tflops.bf16.value" in err


def test_a_reward_pool_of_a_billion_workers_costs_no_more_than_its_samples(tmp_path):
    """Issue 35: 10^9 reward workers used to be a list of 10^9 free times (8 GB) before the first sample."""
    assert main(["run", QUICKSTART, "--steps", "1", "--set", "workload.reward.workers=1000000000",
                 "--out", str(tmp_path / "run")]) == 0


def test_ppo_epochs_are_bounded_by_what_recipes_use(capsys):
    """Issue 35: 10^6 PPO epochs ran silently for hours; recipes use 1-4 (classic PPO up to ~10)."""
    assert main(["check", QUICKSTART, "--set", "algorithm.ppo_epochs=1000000"]) == 2
    assert "algorithm.ppo_epochs" in capsys.readouterr().err


def test_plan_refuses_a_workload_too_big_to_simulate_before_searching(capsys):
    """Issue 35: `rlsim plan` on 10^7 prompts a step died after minutes; it is refused before the search starts."""
    assert main(["plan", QUICKSTART, "--gpus", "8", "--set", "algorithm.prompts_per_step=10000000"]) == 2
    assert "run.max_rollouts" in capsys.readouterr().err


@pytest.mark.parametrize("row", [{"dtype": ["bf16"]}, {"m": 1.0e9}, {"m": True}, {"tflops": "fast", "median_s": None}])
def test_calibrate_fit_refuses_a_malformed_gemm_row_at_its_row(tmp_path, capsys, row):
    """Found by the pipeline fuzz: a GEMM row whose dtype was a list, whose size was a whole float or a boolean, or
    whose throughput was text raised TypeError inside the validators."""
    gemm = {"kernel": "gemm", "dtype": "bf16", "m": 256, "n": 4096, "k": 4096, "median_s": 1e-4, **row}
    raw = {"schema": "rlsim-calibration-raw/1", "origin": "measured", "mode": "full", "device": {"type": "synthetic"},
           "measurements": [gemm]}
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(raw))
    code = main(["calibrate", "fit", str(path), "--base", "h100-sxm", "--out", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert str(path) in err
        assert not (tmp_path / "out.yaml").exists()  # nothing half-made is left behind
