"""Validation machinery: the shipped manifest and scenarios, manifest errors, error and speed-up arithmetic, the
parity plot, the docs writer and the command's bad input. Nothing here simulates (V8 prices weight sync only)."""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rlsim.api import load_scenario, with_
from rlsim.cli import main
from rlsim.config.run_length import MAX_FILL_STEPS, fill_steps
from rlsim.errors import ScenarioError
from rlsim.validation.cases import DEFAULT_MANIFEST, MEASURED_STEPS, load_manifest, scenario_path
from rlsim.validation.docs import MARKER, PARITY_FILE, write_docs
from rlsim.validation.figures import check_name, kind_of, read_figure
from rlsim.validation.parity import parity_svg
from rlsim.validation.run import case_scenario, run_validation, select_cases
from rlsim.validation.table import FigureRow, PairRow, Validation, compare_pairs

FOLDER = DEFAULT_MANIFEST.parent
MANIFEST = load_manifest()


def test_every_group_of_the_brief_has_cases():
    # V1-V8 are the brief's groups (shared/validation/cases.md); V9 is a published run added beyond them.
    assert {f"V{i}" for i in range(1, 9)} <= {c.group for c in MANIFEST.cases}


@pytest.mark.parametrize("case", MANIFEST.cases, ids=[c.name for c in MANIFEST.cases])
def test_every_case_scenario_loads_with_its_overrides(case):
    scenario = load_scenario(scenario_path(DEFAULT_MANIFEST, case), case.overrides)
    for path, value in case.set.items():
        if path == "model":
            assert scenario.model.name == value


@pytest.mark.parametrize("case", MANIFEST.cases, ids=[c.name for c in MANIFEST.cases])
def test_simulated_cases_are_measured_after_the_pipeline_fills(case):
    if not any(kind_of(f.figure).needs_run for f in case.figures):
        return
    scenario = case_scenario(DEFAULT_MANIFEST, case)
    warmup = fill_steps(scenario.schedule)
    assert scenario.run.warmup_steps >= warmup
    assert scenario.run.steps - scenario.run.warmup_steps >= (MEASURED_STEPS if warmup else 1)


def test_the_fill_follows_how_far_generation_may_run_ahead():
    case = next(c for c in MANIFEST.cases if c.name == "v5-staleness-1")
    scenario = load_scenario(scenario_path(DEFAULT_MANIFEST, case), case.overrides)
    assert fill_steps(scenario.schedule) == 2
    assert fill_steps(with_(scenario, {"schedule.max_staleness": 3}).schedule) == 4
    assert fill_steps(with_(scenario, {"schedule.max_staleness": 0.5}).schedule) == 2  # part of a batch ahead
    assert fill_steps(with_(scenario, {"schedule.max_staleness": 64}).schedule) == MAX_FILL_STEPS + 1
    synchronous = with_(scenario, {"schedule.mode": "sync", "schedule.max_staleness": None,
                                   "schedule.partial_rollout": {"mode": "off"}, "placement.mode": "colocated",
                                   "placement.training.gpus": None})
    assert fill_steps(synchronous.schedule) == 0


@pytest.mark.parametrize("path", sorted(FOLDER.glob("*.yaml")), ids=lambda p: p.name)
def test_every_scenario_file_cites_its_source_and_assumptions(path):
    if path == DEFAULT_MANIFEST:
        return
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    assert "Source" in header or "source" in header
    assert "Assumption" in header
    assert any(c.scenario == path.name for c in MANIFEST.cases), f"{path.name} is used by no case"


def _manifest(tmp_path: Path, text: str) -> Path:
    (tmp_path / "s.yaml").write_text((FOLDER / "v8-weight-sync-h20.yaml").read_text())
    path = tmp_path / "cases.yaml"
    path.write_text(text)
    return path


CASE = """cases:
  - name: a
    group: V8
    title: t
    source: s
    scenario: s.yaml
    figures:
      - {figure: weight_sync_s.per_tensor, published: 0.12}
      - {figure: weight_sync_s.checkpoint_engine, published: 0.02}
    inputs: known
"""


def test_an_unknown_figure_is_reported_with_its_line_and_the_valid_names(tmp_path):
    path = _manifest(tmp_path, CASE.replace("weight_sync_s.per_tensor", "weight_sync_s.per_tensr"))
    with pytest.raises(ScenarioError) as err:
        load_manifest(path)
    assert err.value.line == 8
    assert "per_tensor" in err.value.render() and "stage_s" in err.value.render()


def test_a_stage_figure_adds_up_the_stages_it_joins():
    class Run:  # the one field a stage figure reads
        metrics = {"stages_s": {"old_log_prob": 5.0, "ref": 4.0, "gen": 40.0}}

    assert check_name("stage_s.old_log_prob+ref") is None
    assert read_figure("stage_s.old_log_prob+ref", None, Run()) == 9.0
    assert read_figure("stage_s.gen", None, Run()) == 40.0
    assert "joined by +" in check_name("stage_s.old_log_prob+refs")
    assert check_name("stage_s.ref+ref") is not None  # a stage counted twice is a typo, not a figure
    assert check_name("share_pct.rollout+reward") is not None  # only stage times add up


def test_the_rollout_share_counts_the_weight_switch_as_verl_times_it():
    class Run:  # verl's gen timer wraps generate_sequences, which reshards the weights before generating
        metrics = {"stages_s": {"gen": 60.0, "weight_sync": 10.0, "reward": 5.0, "old_log_prob": 7.0, "ref": 3.0,
                                "values": 0.0, "update_actor": 15.0, "update_critic": 0.0, "wait": 0.0}}

    assert read_figure("share_pct.rollout", None, Run()) == 70.0
    assert read_figure("share_pct.reward", None, Run()) == 5.0
    assert read_figure("share_pct.training", None, Run()) == 25.0


def test_a_pair_naming_a_missing_case_suggests_the_closest(tmp_path):
    path = _manifest(tmp_path, CASE + 'pairs:\n  - {name: p, what: w, baseline: "b:weight_sync_s.per_tensor",\n'
                     '     contender: "a:weight_sync_s.checkpoint_engine"}\n')
    with pytest.raises(ScenarioError) as err:
        load_manifest(path)
    assert err.value.line == 12 and err.value.path == "pairs[0].baseline"
    assert "no case named 'b'" in err.value.render()


def test_a_missing_scenario_file_is_reported(tmp_path):
    path = _manifest(tmp_path, CASE.replace("scenario: s.yaml", "scenario: nowhere.yaml"))
    with pytest.raises(ScenarioError) as err:
        load_manifest(path)
    assert err.value.path == "cases[0].scenario" and err.value.line == 6


def test_a_pair_without_published_figures_needs_a_published_speedup(tmp_path):
    text = CASE.replace("published: 0.02", "published: null")
    pair = ('pairs:\n  - {name: p, what: w, baseline: "a:weight_sync_s.per_tensor",\n'
            '     contender: "a:weight_sync_s.checkpoint_engine"}\n')
    with pytest.raises(ScenarioError, match="published_speedup"):
        load_manifest(_manifest(tmp_path, text + pair))
    assert load_manifest(_manifest(tmp_path, text + pair.replace("}\n", ", published_speedup: 6.0}\n"))).pairs


def _row(case, figure, published, simulated, is_time=True):
    return FigureRow(case=case, group="V0", figure=figure, unit="s", published=published, simulated=simulated,
                     is_time=is_time)


def test_errors_median_and_worst_are_over_times_only():
    rows = (_row("a", "step_s", 100, 110), _row("b", "step_s", 100, 80), _row("c", "step_s", 10, 10.5),
            _row("d", "tokens_per_s", 100, 300, is_time=False))
    validation = Validation(rows=rows, pairs=())
    assert [r.error_pct for r in rows] == pytest.approx([10, -20, 5, 200])
    assert validation.median_abs_error_pct == pytest.approx(10)
    assert validation.worst_abs_error_pct == pytest.approx(20)


def test_each_group_reports_the_median_and_worst_of_its_own_times():
    rows = (FigureRow("a", "V1", "step_s", "s", 100, 150, True), FigureRow("b", "V1", "step_s", "s", 100, 90, True),
            FigureRow("c", "V1", "step_s", "s", 100, 120, True), FigureRow("d", "V3", "step_s", "s", 100, 95, True),
            FigureRow("e", "V3", "tokens_per_s", "tok/s", 100, 300, False))
    groups = Validation(rows=rows, pairs=()).by_group
    assert [(g.group, g.time_figures) for g in groups] == [("V1", 3), ("V3", 1)]
    assert groups[0].median_abs_error_pct == pytest.approx(20) and groups[0].worst_abs_error_pct == pytest.approx(50)
    assert groups[1].median_abs_error_pct == pytest.approx(5) and groups[1].worst_abs_error_pct == pytest.approx(5)


def test_speedups_winners_and_ties():
    faster = PairRow("p", "w", "a", "b", published_speedup=2.0, simulated_speedup=1.7)
    assert faster.winner_correct and faster.ratio_error_pct == pytest.approx(-15)
    assert not PairRow("p", "w", "a", "b", 2.0, 0.9).winner_correct
    tie = PairRow("p", "w", "a", "b", 1.0, 0.87)  # within the 15 % ratio bound
    assert tie.published_winner == "tie" and tie.winner_correct
    assert not PairRow("p", "w", "a", "b", 1.0, 0.7).winner_correct
    # A simulation that does not move picks no winner, even when rounding leaves it a hair above 1.
    unmoved = PairRow("p", "w", "a", "b", 1.17, 1.000000000000002)
    assert unmoved.simulated_winner == "tie" and not unmoved.winner_correct
    assert PairRow("p", "w", "a", "b", 1.09, 1.04).winner_correct  # a small gain, foreseen


def test_time_pairs_invert_and_throughput_pairs_do_not():
    manifest = load_manifest()
    rows = (_row("v1-colocated-32", "step_s", 790.10, 400), _row("v1-async-16-16", "step_s_less.weight_sync", 294.77, 100),
            _row("v4-verl-1.5b-256", "tokens_per_s", 78000, 50000, False),
            _row("v4-areal-1.5b-256", "tokens_per_s", 148000, 200000, False))
    pairs = {p.name: p for p in compare_pairs(manifest, rows)}
    assert set(pairs) == {"v1-32-gpus", "v4-1.5b-256"}
    assert pairs["v1-32-gpus"].published_speedup == pytest.approx(790.10 / 294.77)
    assert pairs["v1-32-gpus"].simulated_speedup == pytest.approx(4.0)
    assert pairs["v4-1.5b-256"].simulated_speedup == pytest.approx(4.0)


def test_select_by_group_or_name_and_reject_unknown_names():
    assert {c.group for c in select_cases(MANIFEST, ["V8"])} == {"V8"}
    assert [c.name for c in select_cases(MANIFEST, ["v1-colocated-32"])] == ["v1-colocated-32"]
    with pytest.raises(ScenarioError, match="did you mean 'v1-colocated-32'"):
        select_cases(MANIFEST, ["v1-colocated-23"])


def test_case_names_and_groups_match_in_any_letter_case():
    assert select_cases(MANIFEST, ["v8"]) == select_cases(MANIFEST, ["V8"])
    assert [c.name for c in select_cases(MANIFEST, ["V1-Colocated-32", "v1-COLOCATED-32"])] == ["v1-colocated-32"]


def test_parity_plot_places_points_on_a_log_log_grid():
    rows = (_row("a", "step_s", 1.0, 1.0), _row("b", "step_s", 100.0, 50.0), _row("c", "x", 10.0, 10.0, False),
            FigureRow("d", "V0", "rollout_tokens_per_s", "tokens/s", None, 5.0, False))
    root = ET.fromstring(parity_svg(rows))
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.findall(f"{ns}circle")
    assert len(circles) == 2 and len(root.findall(f"{ns}rect")) >= 2
    (x1, y1), (x2, y2) = [(float(c.get("cx")), float(c.get("cy"))) for c in circles]
    assert x2 > x1 and y2 < y1  # larger values right and up
    # On a log axis, 50 sits log10(2) of a decade below 100 on the y axis while x stays at 100.
    decade = (x2 - x1) / 2
    assert (y1 - y2) == pytest.approx(decade * (2 - math.log10(2)), rel=1e-3)


def test_docs_writer_keeps_the_hand_written_introduction(tmp_path):
    page = tmp_path / "validation.md"
    page.write_text(f"# Intro\n\nhand-written\n\n{MARKER}\n\nold table\n")
    validation = Validation(rows=(_row("v1-colocated-32", "step_s", 790.10, 700),), pairs=())
    written = write_docs(validation, MANIFEST, page)
    text = page.read_text()
    assert written == [page, tmp_path / PARITY_FILE]
    assert text.startswith("# Intro\n\nhand-written") and "old table" not in text
    assert "| V0 | v1-colocated-32 | borrowed | `step_s` | s | 790 | 700 | -11.4% |" in text
    assert "| V0 | 1 | 11.4% | 11.4% |" in text  # the group's own median and worst
    assert "| `step_s` | s | lower | mean step time over the measured steps |" in text
    assert f"]({PARITY_FILE})" in text and (tmp_path / PARITY_FILE).read_text().startswith("<svg")


def test_weight_sync_cases_run_without_simulating_and_print_json(capsys):
    assert main(["validate", "--case", "V8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"rows", "pairs", "median_abs_error_pct", "worst_abs_error_pct", "winners_correct",
            "winners_total"} <= set(out)
    assert len(out["rows"]) == 6 and out["winners_total"] == 3
    assert out["groups"] == [{"group": "V8", "time_figures": 6, "median_abs_error_pct": out["median_abs_error_pct"],
                              "worst_abs_error_pct": out["worst_abs_error_pct"]}]
    assert all(r["simulated"] > 0 for r in out["rows"])
    assert out == run_validation(DEFAULT_MANIFEST, ["V8"]).as_dict()


def test_an_unknown_case_exits_2_without_a_traceback(capsys):
    assert main(["validate", "--case", "V99"]) == 2
    err = capsys.readouterr().err
    assert "no validation case or group named 'V99'" in err and "Traceback" not in err


def test_a_bad_override_is_reported_at_its_line_in_the_manifest(tmp_path):
    text = CASE.replace("    scenario: s.yaml\n", "    scenario: s.yaml\n    set: {placement.rollout.gpus: 0}\n")
    path = _manifest(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        load_manifest(path)
    assert err.value.file == str(path) and err.value.line == 7
    assert err.value.path.startswith("cases[0].set.placement.rollout.gpus")


def test_case_results_do_not_depend_on_the_number_of_processes():
    names = ["v3-llama-8b-on-policy", "V8"]
    assert run_validation(DEFAULT_MANIFEST, names, jobs=2).as_dict() == run_validation(DEFAULT_MANIFEST, names).as_dict()


# ---- probing an open assumption: `rlsim validate --set` ------------------------------------------------------------


def _case(name: str):
    return next(c for c in MANIFEST.cases if c.name == name)


def test_a_probe_applies_on_top_of_each_cases_own_settings():
    scenario = case_scenario(DEFAULT_MANIFEST, _case("v1-colocated-128"),
                             probe={"workload.response_tokens.scale": 2})
    assert scenario.workload.response_tokens.scale == 2
    assert scenario.placement.rollout.gpus == 128  # the case's own override still holds


def test_a_probe_that_sets_the_steps_replaces_the_fill_rule():
    async_case = _case("v1-async-16-16")
    assert case_scenario(DEFAULT_MANIFEST, async_case).run.steps > 1
    probed = case_scenario(DEFAULT_MANIFEST, async_case, probe={"run.steps": 2, "run.warmup_steps": 1})
    assert (probed.run.steps, probed.run.warmup_steps) == (2, 1)


def test_a_probe_moves_the_figures_reports_itself_and_leaves_the_page_alone(capsys, tmp_path):
    page = tmp_path / "validation.md"
    assert main(["validate", "--case", "V8", "--json", "--docs", str(page),
                 "--set", "schedule.weight_sync.bucket_mib=64"]) == 0
    probed = json.loads(capsys.readouterr().out)
    assert probed["probe"] == {"schedule.weight_sync.bucket_mib": 64}
    assert not page.exists()
    shipped = run_validation(DEFAULT_MANIFEST, ["V8"]).as_dict()
    before = {(r["case"], r["figure"]): r["simulated"] for r in shipped["rows"]}
    after = {(r["case"], r["figure"]): r["simulated"] for r in probed["rows"]}
    moved = {key for key in before if after[key] != before[key]}
    # Only the bucketed checkpoint engine has buckets to resize; the per-tensor path sends tensor by tensor.
    assert moved and all(figure.endswith("checkpoint_engine") for _, figure in moved)


def test_a_probe_that_does_not_fit_names_the_cases_it_breaks_and_runs_nothing(capsys):
    assert main(["validate", "--case", "V8", "--set", "workload.nope=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown field 'nope'" in err and "Traceback" not in err
    assert err.count("unknown field") == 1  # one problem, reported once for every case it breaks
    assert all(case.name in err for case in MANIFEST.cases if case.group == "V8")


def test_a_step_less_a_stage_leaves_out_what_the_source_times_apart():
    from types import SimpleNamespace

    from rlsim.validation.figures import check_name, read_figure

    result = SimpleNamespace(metrics={"step_time_s": {"mean": 300.0}, "stages_s": {"weight_sync": 12.5, "gen": 20.0}})
    assert check_name("step_s_less.weight_sync") is None and check_name("step_s_less.gen+weight_sync") is None
    assert "step_s_less needs one of" in check_name("step_s_less.sync")
    assert read_figure("step_s_less.weight_sync", None, result) == 287.5
    assert read_figure("step_s_less.gen+weight_sync", None, result) == 267.5
