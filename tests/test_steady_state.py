"""Every entry point answers the steady-state question by default: an off-policy run warms up for its pipeline's fill
and is measured after it, so its step time equals a long run's after the fill, and the winner between a colocated and
a disaggregated setup is the steady-state winner. What a scenario sets explicitly is kept, with a warning when the
measured window includes the fill."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import rlsim
from rlsim.cli import main
from rlsim.config.run_length import DEFAULT_MEASURED_STEPS, MAX_FILL_STEPS, RunLength, fill_steps, resolve_run_length
from rlsim.config.schema import Run, Schedule
from rlsim.sweep import run_sweep

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"
# The quick-start job split 6:2 with 256 prompts a step: enough samples that steps after the fill agree within ~0.5 %,
# so a 1 % bound tests the warm-up rule, not sampling noise. Its fill steps are ~50 % slower than steady state.
SPLIT = {"algorithm.prompts_per_step": 256, "placement.mode": "disaggregated", "placement.rollout.gpus": 6,
         "placement.training.gpus": 2}
OFF_POLICY = {"one_step_off": {"schedule.mode": "one_step_off"},
              "async": {"schedule.mode": "async", "schedule.max_staleness": 2}}
LONG_MEASURED = 8  # steps a reference run measures after the fill


def steady_state(scenario) -> float:
    """Mean step time of a long run measured after the schedule's fill: the answer a default run must give."""
    fill = fill_steps(scenario.schedule)
    long = rlsim.with_(scenario, {"run.steps": fill + LONG_MEASURED, "run.warmup_steps": fill})
    return rlsim.simulate(long).metrics["step_time_s"]["mean"]


@pytest.fixture(scope="module")
def references() -> dict[str, float]:
    base = rlsim.load_scenario(QUICKSTART)
    return {name: steady_state(rlsim.with_(base, {**SPLIT, **changes})) for name, changes in OFF_POLICY.items()}


# ------------------------------------------------------------------------------------------------- the run length


@pytest.mark.parametrize(("schedule", "fill"), [
    ({}, 0), ({"mode": "one_step_off"}, 2), ({"mode": "async", "max_staleness": 2}, 3),
    ({"mode": "async", "max_staleness": 0.5}, 2), ({"mode": "async", "max_staleness": 64}, MAX_FILL_STEPS + 1),
    ({"partial_rollout": {"mode": "april"}}, 2)])
def test_the_fill_is_how_far_generation_may_run_ahead_plus_the_first_step(schedule, fill):
    assert fill_steps(Schedule(**schedule)) == fill


def test_an_unset_run_warms_up_for_the_fill_then_measures_three_steps():
    one_step_off = Schedule(mode="one_step_off")
    assert resolve_run_length(Run(), Schedule()) == RunLength(DEFAULT_MEASURED_STEPS, 0)
    assert resolve_run_length(Run(), one_step_off) == RunLength(2 + DEFAULT_MEASURED_STEPS, 2)


def test_what_the_scenario_sets_is_kept_exactly():
    one_step_off = Schedule(mode="one_step_off")
    assert resolve_run_length(Run(steps=4, warmup_steps=1), one_step_off) == RunLength(4, 1)
    assert resolve_run_length(Run(warmup_steps=0), one_step_off) == RunLength(DEFAULT_MEASURED_STEPS, 0)
    # Only the steps set: the warm-up is still the fill, but never all of the run.
    assert resolve_run_length(Run(steps=4), one_step_off) == RunLength(4, 2)
    assert resolve_run_length(Run(steps=2), one_step_off) == RunLength(2, 1)


def test_a_warm_up_shorter_than_the_fill_warns_and_says_how_to_fix_it():
    scenario = rlsim.load_scenario(QUICKSTART, {**SPLIT, "schedule.mode": "one_step_off", "run.steps": 3,
                                                "run.warmup_steps": 1, "algorithm.prompts_per_step": 16})
    with pytest.warns(rlsim.MeasuredWindowWarning, match="run.warmup_steps: 2"):
        result = rlsim.simulate(scenario)
    assert result.metrics["measured"]["window"] == "steps 1–2 of 0–2 (1 warm-up)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rlsim.simulate(rlsim.with_(scenario, {"run.steps": None, "run.warmup_steps": None}))


# ---------------------------------------------------------------------------------------------- the entry points


@pytest.mark.parametrize("schedule", OFF_POLICY)
def test_simulate_gives_the_steady_state_by_default(schedule, references):
    scenario = rlsim.load_scenario(QUICKSTART, {**SPLIT, **OFF_POLICY[schedule]})
    result = rlsim.simulate(scenario)
    fill = fill_steps(scenario.schedule)
    steps = [s.seconds for s in result.log.steps]
    assert steps[0] > 1.3 * references[schedule]  # the fill is slower: averaging it in would be wrong
    assert result.metrics["measured"]["warmup_steps"] == fill
    assert result.metrics["step_time_s"]["mean"] == pytest.approx(references[schedule], rel=0.01)


@pytest.mark.parametrize("schedule", OFF_POLICY)
def test_rlsim_run_gives_the_steady_state_by_default(schedule, references, tmp_path, capsys):
    sets = [arg for path, value in {**SPLIT, **OFF_POLICY[schedule]}.items() for arg in ("--set", f"{path}={value}")]
    assert main(["run", str(QUICKSTART), *sets, "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["step_time_s"]["mean"] == pytest.approx(references[schedule], rel=0.01)
    printed = capsys.readouterr().out
    fill = metrics["measured"]["warmup_steps"]
    step_lines = [line for line in printed.splitlines() if line[:4].strip().isdigit()]
    assert [int(line[:4]) for line in step_lines] == list(range(fill + DEFAULT_MEASURED_STEPS))
    assert all(("warm-up" in line) == (int(line[:4]) < fill) for line in step_lines)  # marked as in the report
    assert f"measured over                      steps {fill}–{fill + 2} of 0–{fill + 2} ({fill} warm-up)" in printed


def test_a_sweep_gives_the_steady_state_by_default(references, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: steady\nbase: {QUICKSTART}\nset: {json.dumps(SPLIT)}\n"
                     f"cases:\n" + "".join(f"  - {json.dumps(changes)}\n" for changes in OFF_POLICY.values()))
    result = run_sweep(sweep, tmp_path / "out", report=False)
    by_mode = {row["schedule.mode"]: row["step_time_s"] for row in result.rows}
    for name, changes in OFF_POLICY.items():
        assert by_mode[changes["schedule.mode"]] == pytest.approx(references[name], rel=0.01)


def test_the_shipped_32_gpu_pair_names_the_steady_state_winner():
    pair = [rlsim.load_scenario(SCENARIOS / f"qwen2.5-7b-grpo-32xh100-{kind}.yaml")
            for kind in ("colocated", "disaggregated")]
    default = [rlsim.simulate(s).metrics["step_time_s"]["mean"] for s in pair]
    steady = [steady_state(rlsim.with_(s, {"run.steps": None, "run.warmup_steps": None})) for s in pair]
    assert (default[0] < default[1]) == (steady[0] < steady[1])
    for got, want in zip(default, steady, strict=True):
        assert got == pytest.approx(want, rel=0.02)


# ------------------------------------------------------------------------------------------------ what is dropped


def test_sequences_in_flight_at_the_end_are_not_counted_as_dropped():
    scenario = rlsim.load_scenario(QUICKSTART, {**SPLIT, "schedule.mode": "one_step_off",
                                                "algorithm.prompts_per_step": 16})
    metrics = rlsim.simulate(scenario).metrics["sequences"]
    assert metrics["in_flight_at_end"] > 0  # one-step-off leaves the next step's rollouts generating
    assert metrics["dropped"] == 0


# ------------------------------------------------------------------------------------------ never lose a user's run


def test_a_what_if_run_does_not_overwrite_its_baseline(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    small = ["--set", "algorithm.prompts_per_step=8"]
    assert main(["run", str(QUICKSTART), *small]) == 0
    [baseline] = (tmp_path / "runs").iterdir()
    before = (baseline / "metrics.json").read_text()
    assert main(["run", str(QUICKSTART), *small, "--set", "placement.rollout.tp=2"]) == 0
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert folders == [baseline.name, f"{baseline.name},placement.rollout.tp=2"]
    assert (baseline / "metrics.json").read_text() == before
    what_if = tmp_path / "runs" / folders[1]
    assert json.loads((what_if / "resolved.yaml").read_text().split("tp: ")[1].split("\n")[0]) == 2
    # The comparison lands beside its inputs, not in whichever folder the command runs from.
    capsys.readouterr()
    assert main(["compare", str(baseline), str(what_if)]) == 0
    assert f"wrote {tmp_path / 'runs' / f'compare-{baseline.name}-vs-{what_if.name}.html'}" in capsys.readouterr().out
    # Nothing half-written is left beside the run folders.
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]
