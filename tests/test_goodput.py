"""Goodput over a long horizon (rlsim.metrics.goodput): the sampled horizon against its closed form and Young's
checkpoint interval, determinism, the failure-free case exactly, failures growing with GPUs, invariants over random
inputs, and a scenario's run end to end (metrics.json, the summary, compare, check) with its input errors."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlsim
from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import ScenarioError
from rlsim.metrics import RunFacts, run_metrics
from rlsim.metrics.goodput import (
    LOSS_CAUSES,
    SECONDS_PER_HOUR,
    LongRunTimes,
    PoolFailures,
    closed_form,
    expected_segment_s,
    goodput,
)
from rlsim.metrics.long_run import LongRunFacts
from rlsim.report.compare import NamedMetrics, compare_text
from rlsim.report.text import headline_text
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import scenario_yaml
from tests.test_sim_loop import reject_pool_deadlock, small_scenario

DAY = 86400.0
TOKENS_PER_STEP = 1e6
# How many standard errors a sampled mean may stray from its expectation: a 4σ event, ~6e-5 two-sided for a normal
# mean, so a correct model fails such a test about once in 16,000 runs (and never here: the seeds are fixed).
SIGMAS = 4.0


def times(*, gpus: int = 100, mtbf_h: float | None = 20.0, horizon_days: float = 365.0, restart_s: float = 600.0,
          restore_s: float = 60.0, save_freq: int | None = 10, save_s: float = 30.0, test_freq: int | None = None,
          evaluation_s: float = 0.0) -> LongRunTimes:
    """A long run whose job MTBF is `mtbf_h` over `gpus` GPUs (None: no failures)."""
    per_gpu = 0.0 if mtbf_h is None else 1.0 / (mtbf_h * SECONDS_PER_HOUR * gpus)
    return LongRunTimes(horizon_days * DAY, (PoolFailures("main", gpus, per_gpu),), restart_s, restore_s, save_freq,
                        save_s, test_freq, evaluation_s)


def over_seeds(step_s: float, run: LongRunTimes, key: str, seeds: int) -> np.ndarray:
    return np.array([goodput(step_s, TOKENS_PER_STEP, run.pools[0].gpus, run, seed)[key] for seed in range(seeds)])


def test_sampled_goodput_agrees_with_the_renewal_closed_form():
    # One failure every 20 h for a year (~440 failures a seed), a 630 s segment between checkpoints.
    step_s, run = 60.0, times()
    sampled = over_seeds(step_s, run, "tokens_per_gpu_hour", 60)
    expected = closed_form(step_s, TOKENS_PER_STEP, 100, run)["expected_tokens_per_gpu_hour"]
    standard_error = sampled.std(ddof=1) / math.sqrt(sampled.size)
    # The horizon cuts the last segment: the renewal count differs from horizon / mean segment by at most about one
    # segment's steps at each end.
    edge = 2 * run.save_freq * TOKENS_PER_STEP / (100 * run.horizon_s) * SECONDS_PER_HOUR
    assert abs(sampled.mean() - expected) <= SIGMAS * standard_error + edge
    # Failures cost something here, or the agreement says nothing.
    failure_free = TOKENS_PER_STEP / (step_s + run.save_s / run.save_freq) / 100 * SECONDS_PER_HOUR
    assert expected < 0.99 * failure_free


def test_the_expected_segment_time_is_dalys_formula():
    # No failures: the segment itself; rare failures: each costs about half a segment and the recovery.
    assert expected_segment_s(600.0, 300.0, 0.0) == 600.0
    rate = 1e-7
    assert expected_segment_s(600.0, 300.0, rate) == pytest.approx(600.0 + rate * 600.0 * (600.0 / 2 + 300.0), rel=1e-6)


def test_youngs_interval_is_the_optimum_of_the_closed_form_to_first_order():
    save_s, restart_s, mtbf = 60.0, 900.0, 50.0 * SECONDS_PER_HOUR
    rate = 1 / mtbf
    young = math.sqrt(2 * save_s * mtbf)
    tau = np.arange(60.0, 40_000.0, 0.25)
    lost = np.exp(rate * restart_s) * np.expm1(rate * (tau + save_s)) / (rate * tau)
    optimum = float(tau[np.argmin(lost)])
    # Daly's higher-order estimate (FGCS 2006) is this model's optimum to within the next order; Young's is first
    # order, off by about a third of sqrt(δ / 2M).
    ratio = save_s / (2 * mtbf)
    daly = young * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_s
    assert abs(optimum - daly) / optimum < ratio
    assert abs(optimum - young) / optimum < math.sqrt(ratio)
    step_s = 60.0
    run = times(mtbf_h=50.0, restart_s=restart_s, restore_s=0.0, save_s=save_s)
    form = closed_form(step_s, TOKENS_PER_STEP, 100, run)
    assert form["young_daly_interval_s"] == pytest.approx(young)
    # The save_freq of the best expected goodput is Young's, give or take the step it rounds to.
    best = max(range(1, 400), key=lambda n: closed_form(
        step_s, TOKENS_PER_STEP, 100, times(mtbf_h=50.0, restart_s=restart_s, restore_s=0.0, save_s=save_s,
                                            save_freq=n))["expected_tokens_per_gpu_hour"])
    assert abs(best - form["young_daly_save_freq"]) <= 1


def test_the_same_seed_gives_the_same_goodput_and_another_seed_another():
    run = times(horizon_days=30.0)
    assert goodput(60.0, TOKENS_PER_STEP, 100, run, 7) == goodput(60.0, TOKENS_PER_STEP, 100, run, 7)
    draws = {goodput(60.0, TOKENS_PER_STEP, 100, run, seed)["gpu_hours_lost"]["recomputed_work"] for seed in range(5)}
    assert len(draws) > 1


def test_without_failures_goodput_is_the_throughput_less_checkpoints_and_evaluation_exactly():
    step_s, save_freq, test_freq, save_s, evaluation_s = 60.0, 10, 5, 30.0, 45.0
    segment = save_freq * step_s + save_freq // test_freq * evaluation_s + save_s
    run = times(mtbf_h=None, horizon_days=100 * segment / DAY, save_freq=save_freq, save_s=save_s, test_freq=test_freq,
                evaluation_s=evaluation_s)
    result = goodput(step_s, TOKENS_PER_STEP, 100, run, 0)
    assert result["steps"] == 100 * save_freq
    assert result["failures"] == 0
    assert result["tokens_per_s"] == pytest.approx(save_freq * TOKENS_PER_STEP / segment, rel=1e-12)
    lost = result["gpu_hours_lost"]
    assert lost["checkpoint_save"] == pytest.approx(save_s / segment, rel=1e-12)
    assert lost["evaluation"] == pytest.approx(2 * evaluation_s / segment, rel=1e-12)
    assert lost["recomputed_work"] == lost["restart"] == lost["restore"] == 0.0
    assert result["fraction"] == pytest.approx(save_freq * step_s / segment, rel=1e-12)


def test_more_gpus_fail_more_often():
    small, large = times(gpus=100, mtbf_h=400.0, horizon_days=60), times(gpus=100, mtbf_h=100.0, horizon_days=60)
    # The same per-GPU rate over four times the GPUs: LongRunTimes adds the pools' GPUs × rate.
    per_gpu = small.pools[0].per_gpu_per_s
    larger = LongRunTimes(large.horizon_s, (PoolFailures("main", 400, per_gpu),), large.restart_s, large.restore_s,
                          large.save_freq, large.save_s, large.test_freq, large.evaluation_s)
    assert larger.failures_per_s == pytest.approx(4 * small.failures_per_s)
    few = over_seeds(60.0, small, "failures", 40)
    many = over_seeds(60.0, larger, "failures", 40)
    # Poisson counts: the mean is the rate × horizon, the variance too.
    for counts, run in ((few, small), (many, larger)):
        expected = run.failures_per_s * run.horizon_s
        assert abs(counts.mean() - expected) <= SIGMAS * math.sqrt(expected / counts.size)
    assert many.mean() > few.mean()


@settings(max_examples=150, deadline=None)
@given(step_s=st.floats(1.0, 3600.0), mtbf_h=st.one_of(st.none(), st.floats(0.05, 1e4)),
       horizon_days=st.floats(0.05, 90.0), restart_s=st.floats(0.0, 3600.0), restore_s=st.floats(0.0, 600.0),
       save_freq=st.one_of(st.none(), st.integers(1, 200)), save_s=st.floats(0.0, 600.0),
       test_freq=st.one_of(st.none(), st.integers(1, 50)), evaluation_s=st.floats(0.0, 900.0),
       seed=st.integers(0, 2**32))
def test_invariants_of_any_horizon(step_s, mtbf_h, horizon_days, restart_s, restore_s, save_freq, save_s, test_freq,
                                   evaluation_s, seed):
    run = times(mtbf_h=mtbf_h, horizon_days=horizon_days, restart_s=restart_s, restore_s=restore_s, save_freq=save_freq,
                save_s=save_s, test_freq=test_freq, evaluation_s=evaluation_s)
    result = goodput(step_s, TOKENS_PER_STEP, 100, run, seed)
    lost = result["gpu_hours_lost"]
    # Every second of the horizon is a kept step's or lost to one cause.
    assert set(lost) == set(LOSS_CAUSES)
    assert all(share >= -1e-12 for share in lost.values())
    assert result["fraction"] + sum(lost.values()) == pytest.approx(1.0, abs=1e-9)
    assert 0.0 <= result["fraction"] <= 1.0 + 1e-12
    assert result["steps"] * step_s <= run.horizon_s * (1 + 1e-12)
    # Goodput never beats the failure-free throughput.
    assert result["tokens_per_s"] <= TOKENS_PER_STEP / step_s * (1 + 1e-12)
    assert result["failures"] == sum(result["failures_by_pool"].values())
    if mtbf_h is None:
        assert result["failures"] == 0 and lost["recomputed_work"] == 0.0



def test_a_segment_hundreds_of_mtbfs_long_gives_nil_expected_goodput_not_an_overflow():
    # 48 steps of 2,662 s between saves under a job MTBF of 3 minutes: e^(segment / MTBF) is past a float's range.
    step_s, run = 2662.0, times(mtbf_h=0.05, horizon_days=2.0, save_freq=48)
    assert expected_segment_s(48 * step_s, 660.0, run.failures_per_s) == math.inf
    result = goodput(step_s, TOKENS_PER_STEP, 100, run, seed=0)
    expected = result["closed_form"]
    assert expected["expected_fraction"] == 0.0 and expected["expected_tokens_per_gpu_hour"] == 0.0
    assert result["steps"] == 0 and result["fraction"] == 0.0  # no segment completed in the sample either

# ---------------------------------------------------------------------------------------------- the scenario's run

SCENARIO = """
name: goodput-tiny
seed: 5
cluster: {pools: [{name: main, gpu: h100-sxm, nodes: 1}]}
model: Qwen2.5-0.5B
algorithm: {name: grpo, prompts_per_step: 8, samples_per_prompt: 4, max_prompt_tokens: 256, max_response_tokens: 512}
workload:
  prompt_tokens: {kind: lognormal, median_tokens: 100, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 200, sigma: 0.5}
placement: {mode: colocated, rollout: {gpus: 8, tp: 1}}
run: {steps: 2, horizon: 30d}
failures: {mtbf_gpu_hours: 100}
checkpoint: {save_freq: 20}
evaluation: {test_freq: 10, prompts: 64}
"""


def _without_long_run() -> str:
    text = SCENARIO.replace("run: {steps: 2, horizon: 30d}", "run: {steps: 2}")
    return "\n".join(line for line in text.splitlines() if not line.startswith(("failures", "checkpoint", "evaluation")))


@pytest.fixture(scope="module")
def runs():
    return rlsim.simulate(parse_scenario(SCENARIO)), rlsim.simulate(parse_scenario(_without_long_run()))


def test_a_scenario_with_a_horizon_reports_goodput_and_one_without_does_not(runs):
    long, short = runs
    result = long.metrics["goodput"]
    assert "goodput" not in short.metrics
    # Failures and checkpoints do not change the simulated steps.
    assert long.metrics["step_time_s"] == short.metrics["step_time_s"]
    assert result["expected_failures"] == pytest.approx(8 * 24 / 100 * 30)
    assert 0.0 < result["tokens_per_gpu_hour"] < long.metrics["throughput"]["tokens_per_s_per_gpu"] * SECONDS_PER_HOUR
    assert result["checkpoint_gib"] > 0 and result["save_s"] > 0 and result["evaluation_s"] > 0
    assert "goodput: trained tokens per GPU-hour" in headline_text(long.metrics)
    assert "goodput" not in headline_text(short.metrics)
    both = compare_text([NamedMetrics("long", long.metrics), NamedMetrics("short", short.metrics)])
    assert "goodput: trained tokens per GPU-hour" in both


def test_the_horizon_is_sampled_from_the_scenarios_seed(runs):
    long, _ = runs
    again = rlsim.simulate(parse_scenario(SCENARIO))
    assert again.metrics["goodput"] == long.metrics["goodput"]
    other = rlsim.simulate(parse_scenario(SCENARIO.replace("seed: 5", "seed: 6")))
    assert other.metrics["goodput"]["failures"] != long.metrics["goodput"]["failures"] or \
        other.metrics["goodput"]["gpu_hours_lost"] != long.metrics["goodput"]["gpu_hours_lost"]


def test_more_nodes_expect_more_failures():
    one = LongRunFacts.from_bound(bind(parse_scenario(SCENARIO)))
    two = LongRunFacts.from_bound(bind(parse_scenario(SCENARIO.replace("nodes: 1", "nodes: 2").replace(
        "rollout: {gpus: 8", "rollout: {gpus: 16"))))
    assert one is not None and two is not None
    assert two.times(10.0).failures_per_s == pytest.approx(2 * one.times(10.0).failures_per_s)


@pytest.mark.parametrize(("change", "field"), [
    (("failures: {mtbf_gpu_hours: 100}", "failures: {mtbf_gpu_hours: -100}"), "failures.mtbf_gpu_hours"),
    (("save_freq: 20", "save_freq: 0"), "checkpoint.save_freq"),
    (("test_freq: 10", "test_freq: -1"), "evaluation.test_freq"),
    (("horizon: 30d", "horizon: 30 days"), "run.horizon"),
    (("horizon: 30d", "horizon: 0h"), "run.horizon"),
    (("{mtbf_gpu_hours: 100}", "{mtbf_gpu_hours: 100, failures_per_gpu_day: 0.001}"), "failures"),
    (("{mtbf_gpu_hours: 100}", "{failures_per_gpu_day: {gpu: 0.001}}"), "failures.failures_per_gpu_day.gpu"),
    (("run: {steps: 2, horizon: 30d}", "run: {steps: 2}"), "checkpoint"),
    (("{mtbf_gpu_hours: 100}", "{failures_per_gpu_day: 1000}"), "failures"),
    (("prompts: 64}", "prompts: 1000000000}"), "evaluation.prompts"),
    (("failures: {mtbf_gpu_hours: 100}", "failures: {}"), None),
])
def test_bad_long_run_inputs_are_refused_naming_the_field(change, field):
    text = SCENARIO.replace(*change)
    if field is None:
        parse_scenario(text)  # the GPU profile's rate
        with pytest.raises(ScenarioError, match="failures.failures_per_gpu_day") as err:
            parse_scenario(text.replace("h100-sxm", "b200"))
        assert "no fleet has published a failure rate for b200" in str(err.value)
        return
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text)
    assert any(problem.path.startswith(field) for problem in err.value.problems), str(err.value)


def test_a_horizon_shorter_than_a_step_is_refused():
    facts = LongRunFacts.from_bound(bind(parse_scenario(SCENARIO.replace("horizon: 30d", "horizon: 10s"))))
    assert facts is not None
    with pytest.raises(ScenarioError, match="run.horizon") as err:
        facts.times(60.0)
    assert "shorter than one simulated step" in str(err.value)


def test_check_prints_the_checkpoint_and_youngs_interval(tmp_path: Path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text(SCENARIO.replace("save_freq: 20", "save_freq: 5000"))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint every 5000 steps" in out and "GiB" in out and "restore" in out
    assert "hint: Young's interval" in out


# ----------------------------------------------------------------------------------------------------- rlsim plan

PLAN_WORKLOAD = Path(__file__).parents[1] / "scenarios" / "sweeps" / "plan-qwen2.5-7b-grpo.yaml"


@pytest.fixture(scope="module")
def long_workload(tmp_path_factory) -> Path:
    """The plan test's workload, small, as a month with checkpoints every 10 steps."""
    text = (PLAN_WORKLOAD.read_text().replace("prompts_per_step: 256", "prompts_per_step: 32")
            .replace("samples_per_prompt: 16", "samples_per_prompt: 8")
            .replace("max_response_tokens: 8192", "max_response_tokens: 2048"))
    path = tmp_path_factory.mktemp("plan") / "long.yaml"
    path.write_text(text + "\ncheckpoint: {save_freq: 10}\n")
    return path


def test_plan_ranks_by_goodput_when_asked(long_workload, capsys):
    assert main(["plan", str(long_workload), "--gpus", "16", "--simulate", "3", "--refine", "0", "--layouts", "0",
                 "--workers", "2", "--rank", "goodput", "--set", "run.horizon=30d", "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert result["rank"] == "goodput"
    goodputs = [r["goodput_tokens_per_s"] for r in result["ranked"]]
    assert goodputs == sorted(goodputs, reverse=True)
    assert all(r["goodput_tokens_per_s"] < r["tokens_per_s"] for r in result["ranked"])
    assert result["why"].startswith(f"by goodput over run.horizon, {result['ranked'][0]['candidate']} delivers")


def test_plan_refuses_to_rank_by_goodput_without_a_horizon(long_workload, capsys):
    assert main(["plan", str(long_workload), "--gpus", "16", "--rank", "goodput"]) == 2
    err = capsys.readouterr().err
    assert "run.horizon" in err and "Traceback" not in err


def test_the_report_shows_goodput_with_its_breakdown(runs):
    from rlsim.report.html import goodput_table

    long, short = runs
    table = goodput_table(long.metrics)
    assert 'data-key="/goodput/gpu_hours_lost/recomputed_work"' in table and "Young&#x27;s save_freq" in table
    assert goodput_table(short.metrics) == ""
    page = long.report_html()
    assert 'id="goodput"' in page and 'data-key="/goodput/tokens_per_gpu_hour"' in page


def test_a_checkpoint_holds_the_trained_state_and_an_async_save_blocks_for_the_host_copy():
    from rlsim.costs.checkpoint import checkpoint_bytes, trained_parameters
    from rlsim.costs.layout import TrainingLayout

    bound = bind(parse_scenario(SCENARIO))
    params = bound.model.total_params
    # FSDP's fp32 parameters are the master copy: 4 + 8 bytes of Adam moments; Megatron adds its bf16 weights.
    assert checkpoint_bytes(bound.model, TrainingLayout(backend="fsdp")) == 12 * params
    assert checkpoint_bytes(bound.model, TrainingLayout(backend="megatron")) == 14 * params
    assert 0 < trained_parameters(bound.model, TrainingLayout(lora_rank=8)) < params / 50
    facts = LongRunFacts.from_bound(bound)
    assert facts is not None and facts.checkpoint_bytes == 12 * params
    # One node writes the whole state at the storage's per-node rate.
    assert facts.write_s == pytest.approx(12 * params / (bound.scenario.checkpoint.write_gbyte_per_s_per_node * 1e9))
    assert facts.save_s(1.0) == facts.write_s and facts.restore_s > 0
    background = LongRunFacts.from_bound(bind(parse_scenario(SCENARIO.replace(
        "save_freq: 20}", "save_freq: 20, async_save: true}"))))
    assert background is not None
    copy = background.groups[0].host_copy_s
    assert 0 < copy < background.write_s
    # Steps longer than the write hide it; shorter ones wait for what is left of it at the next save.
    assert background.save_s(background.write_s) == copy
    tiny = background.write_s / 40
    assert background.save_s(tiny) == pytest.approx(copy + background.write_s - 20 * tiny)
    ppo = LongRunFacts.from_bound(bind(parse_scenario(SCENARIO.replace("name: grpo", "name: ppo"))))
    assert ppo is not None and ppo.groups[0].roles == ("actor", "critic")
    assert ppo.checkpoint_bytes == 2 * facts.checkpoint_bytes


# ------------------------------------------------------------------------------- invariants over random scenarios


@st.composite
def long_run_sections(draw) -> tuple[str, str, dict]:
    """A horizon and the failures, checkpoint and evaluation sections (each possibly left out) of a small run."""
    horizon = draw(st.sampled_from(["2h", "3d", "30d"]))
    rate = draw(st.sampled_from([0.0, 4.74e-4, 0.05]))
    lines = [f"failures: {{failures_per_gpu_day: {rate}, startup_s: {draw(st.sampled_from([0.0, 60.0, 900.0]))}}}"]
    drawn: dict = {"rate": rate, "checkpoint": draw(st.booleans()), "evaluation": draw(st.booleans())}
    if drawn["checkpoint"]:
        lines.append(f"checkpoint: {{save_freq: {draw(st.sampled_from([1, 5, 50]))}, "
                     f"async_save: {str(draw(st.booleans())).lower()}, write_gbyte_per_s_per_node: "
                     f"{draw(st.sampled_from([0.01, 1.0]))}}}")
    if drawn["evaluation"]:
        lines.append(f"evaluation: {{test_freq: {draw(st.sampled_from([1, 7]))}, prompts: "
                     f"{draw(st.sampled_from([4, 32]))}}}")
    return horizon, "\n".join(lines), drawn


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenario(), long_run_sections())
def test_goodput_invariants_over_random_small_scenarios(kwargs, sections):
    horizon, lines, drawn = sections
    kwargs.pop("agents", None)  # a multi-agent run refuses run.horizon: its long-run costs are not modelled
    text = scenario_yaml(**kwargs)
    steps = f"run: {{steps: {kwargs['steps']}}}"
    text = text.replace(steps, steps[:-1] + f", horizon: {horizon}}}") + "\n" + lines + "\n"
    bound = bind(parse_scenario(text))
    try:
        log = simulate_log(bound).log
    except ScenarioError as err:
        reject_pool_deadlock(kwargs, err)
        raise
    facts = RunFacts.from_bound(bound)
    metrics = run_metrics(log, facts)
    result = metrics["goodput"]
    lost = result["gpu_hours_lost"]
    assert result["fraction"] + sum(lost.values()) == pytest.approx(1.0, abs=1e-9)
    assert all(share >= -1e-12 for share in lost.values())
    assert result["steps"] * metrics["step_time_s"]["mean"] <= result["horizon_s"] * (1 + 1e-12)
    assert result["expected_failures"] == pytest.approx(drawn["rate"] * facts.gpus * result["horizon_s"] / DAY)
    assert (result["checkpoint_gib"] > 0) == drawn["checkpoint"]
    assert (lost["evaluation"] > 0) == (drawn["evaluation"] and result["steps"] >= result["test_freq"])
    if drawn["rate"] == 0:
        assert result["failures"] == 0 and lost["recomputed_work"] == lost["restart"] == 0.0
    # The same run gives the same goodput.
    assert run_metrics(log, facts)["goodput"] == result
