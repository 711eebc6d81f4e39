"""`rlsim validate --sensitivity`: each open assumption rerun on top of a case's own settings, and each figure's move."""
from __future__ import annotations

import json
import math

import pytest

from rlsim.cli import main
from rlsim.validation.cases import DEFAULT_MANIFEST, load_manifest
from rlsim.validation.run import case_scenario
from rlsim.validation.sensitivity import ASSUMPTIONS, plan_sensitivity, run_sensitivity

CASE = "v3-llama-8b-on-policy"  # a known-input case that simulates in seconds


@pytest.fixture(scope="module")
def sensitivity():
    return run_sensitivity(plan_sensitivity(DEFAULT_MANIFEST, [CASE]))


def test_every_figure_gets_a_move_per_applicable_assumption(sensitivity):
    assert [r.case for r in sensitivity.rows] == [CASE] * len(sensitivity.rows) and sensitivity.rows
    for row in sensitivity.rows:
        assert set(row.moves_pct) == {a.name for a in ASSUMPTIONS}
        assert all(m is not None and math.isfinite(m) for m in row.moves_pct.values())


def test_the_moves_go_the_way_the_assumptions_push(sensitivity):
    step = next(r for r in sensitivity.rows if r.figure == "step_s")
    # Longer responses, costlier rewards and slower CPUs can only lengthen a synchronous step.
    assert step.moves_pct["lengths"] > 5
    assert all(step.moves_pct[name] > 0 for name in ("reward", "engine_step", "host"))


def test_figures_that_need_no_simulation_do_not_move():
    # V8 prices weight transfers from the scenario alone: no assumption about a run can move them.
    result = run_sensitivity(plan_sensitivity(DEFAULT_MANIFEST, ["v8-qwen2.5-7b-4-4"]))
    assert result.rows and all(m == 0 for r in result.rows for m in r.moves_pct.values() if m is not None)


def test_an_assumption_that_does_not_apply_is_left_out_of_the_plan():
    # An LLM judge has no CPU cost per sample: its case is not rerun for it, and its rows show no move for it.
    judged = next(c for c in load_manifest().cases if case_scenario(DEFAULT_MANIFEST, c).workload.reward.kind
                  == "llm_judge")
    plan = plan_sensitivity(DEFAULT_MANIFEST, [judged.name])
    assert [assumption for _, assumption, _ in plan.runs] == [None, "lengths", "engine_step", "host"]


def test_the_command_prints_a_table_and_valid_json(capsys):
    assert main(["validate", "--sensitivity", "--case", CASE, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {a.name for a in ASSUMPTIONS} == set(data["assumptions"]) == set(data["median_abs_move_pct"])
    assert main(["validate", "--sensitivity", "--case", CASE, "--set", "seed=1"]) == 2
