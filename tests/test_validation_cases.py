"""Every validation case runs and yields its figures, and the validation issue's error bounds are asserted over them.

The cases run once, as `rlsim validate` runs them (the pipeline's fill, then two measured steps), in two processes (CI
has two cores), so the results are the ones `rlsim validate --json` prints and the README's accuracy sentence states.
"""
from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

import pytest

from rlsim.api import simulate
from rlsim.validation.cases import DEFAULT_MANIFEST, MEASURED_STEPS, load_manifest
from rlsim.validation.docs import accuracy_sentence, readme_accuracy
from rlsim.validation.figures import FIGURE_KINDS
from rlsim.validation.run import CaseRun, run_case
from rlsim.validation.table import MEDIAN_BOUND_PCT, RATIO_BOUND_PCT, WORST_BOUND_PCT, Validation, compare_pairs
from tests.sim_scenarios import bound

MANIFEST = load_manifest()
README = Path(__file__).resolve().parent.parent / "README.md"
WHY = "figures and causes: docs/validation.md, 'Why the bounds are missed'"
PROCESSES = 2


@pytest.fixture(scope="module")
def runs() -> dict[str, CaseRun]:
    """Every case, run once for the module."""
    with ProcessPoolExecutor(max_workers=PROCESSES) as pool:
        runs = pool.map(run_case, repeat(DEFAULT_MANIFEST), MANIFEST.cases, repeat(MEASURED_STEPS))
        return {run.case: run for run in runs}


@pytest.fixture(scope="module")
def validation(runs) -> Validation:
    rows = tuple(row for case in MANIFEST.cases for row in runs[case.name].rows)
    return Validation(rows=rows, pairs=compare_pairs(MANIFEST, rows))


@pytest.mark.parametrize("case", MANIFEST.cases, ids=[c.name for c in MANIFEST.cases])
def test_case_runs_and_produces_its_figures(case, runs):
    run = runs[case.name]
    assert [r.figure for r in run.rows] == [f.figure for f in case.figures]
    for row in run.rows:
        assert math.isfinite(row.simulated) and row.simulated > 0, f"{row.figure} = {row.simulated}"
        if row.unit == "%":
            assert row.simulated <= 100


def test_the_readme_states_the_accuracy_validate_measures(validation):
    # `rlsim validate` (writing docs) rewrites the sentence; a change that moves the figures must rewrite it too.
    assert readme_accuracy(README) == accuracy_sentence(validation)


def test_shares_of_a_step_add_up(validation):
    for case in {r.case for r in validation.rows if r.unit == "%"}:
        assert sum(r.simulated for r in validation.rows if r.case == case) == pytest.approx(100)


def test_every_published_pair_is_compared(validation):
    assert [p.name for p in validation.pairs] == [p.name for p in MANIFEST.pairs]


@pytest.mark.xfail(strict=True, reason="known-input times miss: V3 v0.3 Megatron training stages and V9 generation "
                   "too fast, V8's sub-second checkpoint-engine sync, V10's verl passes at twice their logged MFU with "
                   f"eager generation and the colocated switch too fast; {WHY}")
def test_median_and_worst_error_of_known_input_step_and_stage_times(validation):
    known = validation.known
    assert known.median_abs_error_pct <= MEDIAN_BOUND_PCT
    assert known.worst_abs_error_pct <= WORST_BOUND_PCT


def test_every_step_and_stage_time_is_in_one_input_class(validation):
    known, borrowed, everything = validation.by_inputs
    assert known.time_figures + borrowed.time_figures == everything.time_figures == len(validation.time_errors) > 0
    assert {r.inputs for r in validation.rows} <= {"known", "borrowed"}


@pytest.mark.xfail(strict=True, reason=f"not every published winner is picked: GB200 scaling and one-step-off pairs "
                   f"(rack crossings, the Grace host's CPU), V8's 7B checkpoint engine; {WHY}")
def test_every_paired_comparison_picks_the_published_winner(validation):
    wrong = [p.name for p in validation.pairs if not p.winner_correct]
    assert not wrong


@pytest.mark.xfail(strict=True, reason=f"not every speed-up is within {RATIO_BOUND_PCT:g}%: GB200 one-step-off "
                   f"pairs (the Grace host's CPU split unmeasured), AReaL staleness (V5), APRIL on base-model lengths "
                   f"(V7), borrowed-length off-policy pairs (V1, V2); {WHY}")
def test_every_speedup_is_within_the_ratio_bound(validation):
    outside = {p.name: round(p.ratio_error_pct, 1) for p in validation.pairs if abs(p.ratio_error_pct) > RATIO_BOUND_PCT}
    assert not outside


def test_generation_throughput_leaves_out_the_staleness_hold_and_sees_interruption():
    """AReaL's generation throughput: a training-bound run's engines are held back by the staleness bound, so their
    pace while running beats the trained-token rate; interrupting at weight updates removes the wait for the longest
    response, so it rises."""
    base = dict(gpus=8, prompts=32, samples=8, response="{kind: lognormal, median_tokens: 600, sigma: 1.3}",
                max_response=8192, steps=4, max_num_seqs=32, mode="disaggregated", rollout_gpus=6, training_gpus=2,
                schedule="async", staleness=1)
    figures = {}
    for partial in ("off", "interrupt"):
        result = simulate(bound(partial=partial, **base).scenario)
        figures[partial] = (FIGURE_KINDS["generation_tokens_per_s"].read(result.scenario, result, ""),
                            FIGURE_KINDS["tokens_per_s"].read(result.scenario, result, ""))
    generated, trained = figures["off"]
    assert generated > trained
    assert figures["interrupt"][0] > generated
