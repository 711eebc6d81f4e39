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


@pytest.mark.xfail(strict=True, reason=(
    "measured (rlsim validate): median |error| 27.2%, worst 1275% over 87 step/stage-time figures. Causes: "
    "V1/V2 (23 figures, -14..-100%) borrow PolyTrace's verl DAPO lengths (mean ~580 response "
    "tokens), while each source run's lengths moved on their own course over its 400 steps; "
    "V1's published update_actor 313.8 s on 32 H20 needs ~3x those trained tokens at rlsim's training cost, and gen "
    "needs responses reaching the 28K cap, but no single length fits both of V1's modes (rlsim validate --set "
    "workload.response_tokens.scale=3: colocated update_actor -1%, async 16+16 +134%). Async gen, the trainer's "
    "wait, is ~0 vs 21-33 s: the sim trainer is the bottleneck. V3, whose mean lengths are published and whose "
    "recipes are read setting by setting, is +12.5..-31% on step time over the ten rows up to Qwen3-235B (five "
    "from NeMo-RL's v0.6 table; off-policy rows update weights in flight) with the CPU step charged per scheduled "
    "sequence (vllm#10634), vLLM's fused-MoE kernel's fixed times (NVIDIA aiconfigurator's measured calls), "
    "each engine's batch limits as NeMo-RL builds it (vllm.LLM 1,024 sequences, AsyncLLM 128) "
    "and its lengths read as generated tokens; its DeepSeek-V3 rows are -15/-9/+8% "
    "(the 1-step-off refit in NeMo-RL's 0.02-of-memory buckets), "
    "hinging on moving 1.34 TB of weights, which no source times; its eight GB200 rows are +6..-43% with the Grace "
    "host's CPU time at 2.75x an x86 host's (TransformerEngine#2053; on the 30B-A3B on-policy rows rlsim's GB200 "
    "does 1.75x an H100's work per GPU, the published 1.74x, both rows ~31% fast). NeMo-RL v0.3's seven timed-stage "
    "rows show where "
    "V3's steps go short: generation -16..+10%, but policy training -23..-74% and log-probs -84..-15% (rlsim's "
    "Megatron passes run at ~53% of peak with NeMo-RL's fp32 log-softmax priced, after the 0.81 a whole "
    "Megatron step sustains by Megatron-Bridge's four BF16 pretraining runs, where the "
    "published 8B runs at ~42%); the refit, now with its pageable host copies at NeMo-RL#3976's measured 1.8 GB/s, "
    "the colocated broadcast of whole tensors over pipeline stages and NeMo-RL's tensor-by-tensor export, is "
    "+54..-54%. V9, verl's "
    "DeepSeek-V3 on 96 H20 (vLLM TP32 eager over four nodes, ~3,600 kernel launches a decode step counted from vLLM "
    "0.8.5's source), generates and switches the weights (verl's gen timer) in 452 s against 1,050 s (-57%). Worst: V8 "
    "checkpoint engine 7B 0.28 s vs "
    "0.02 s, which is below the 34 ms that 15.2 GB to four GPUs takes at H20's NVLink rate."))
def test_median_and_worst_error_of_step_and_stage_times(validation):
    assert validation.median_abs_error_pct <= MEDIAN_BOUND_PCT
    assert validation.worst_abs_error_pct <= WORST_BOUND_PCT


@pytest.mark.xfail(strict=True, reason=(
    "measured: 24/32 winners right. Wrong: v3-gb200-deepseek-v3-scaling (0.96x against 1.09x: at 256 GB200s "
    "the colocated broadcast over pipeline stages crosses racks), "
    "v3-qwen3-30b-a3b (0.90x against 1.26x: its on-policy step is 31% fast, short on MoE training as the v0.3 "
    "30B-A3B update is, -73%) and "
    "v3-gb200-qwen3-235b-scaling (1.14x against 0.83x: the published run slows on twice the GPUs, over two racks), "
    "v5-staleness-1-2, v5-staleness-2-unbounded, v5-interrupt-1.5b and "
    "v5-interrupt-7b (1.000x-1.007x, ties: AReaL's quarter of training GPUs is the bottleneck in rlsim, "
    "so neither more staleness nor interruption speeds up the steady state), v8-qwen2.5-7b (checkpoint engine slower "
    "than per-tensor: its fixed costs dominate a 7B model)."))
def test_every_paired_comparison_picks_the_published_winner(validation):
    wrong = [p.name for p in validation.pairs if not p.winner_correct]
    assert not wrong


@pytest.mark.xfail(strict=True, reason=(
    "measured: 22/32 speed-ups within 20%. Off: v3-gb200-deepseek-v3 (+32%), v3-gb200-qwen3-235b (+24%), "
    "v3-gb200-qwen3-235b-scaling (+37%), v3-qwen3-30b-a3b (-29%); "
    "v1-32-gpus (-57%) and v2 (-34%, async "
    "1.17x against 1.76x) from "
    "the borrowed lengths; v4-7b-64 (-23%, 0.62x against 0.81x: verl's 7B on 64 GPUs against AReaL); v5 eta 1->2 "
    "(-25%) because AReaL runs are "
    "training-bound in rlsim; v7-dapo-math +234% (over-provisioning a short-length workload gains far more than "
    "APRIL's measured 17%); v8-qwen2.5-7b -88% (the 7B checkpoint engine priced 0.28 s against "
    "0.02 s)."))
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
