"""Sweep files: expansion into points (grid, zip, cases, derived values, constraints), stable ids, and errors that
name the sweep file's line."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.errors import ScenarioError
from rlsim.sweep import expand, load_sweep, point_id
from rlsim.sweep.expressions import Expression, ExpressionError
from rlsim.sweep.table import read_csv_rows

ROOT = Path(__file__).parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def write_sweep(folder: Path, body: str, base: str | None = None) -> Path:
    shutil.copy(QUICKSTART, folder / "base.yaml")
    path = folder / "sweep.yaml"
    path.write_text(f"base: {base or 'base.yaml'}\nset: {{run.steps: 1}}\n" + body)
    return path


def test_grid_zip_and_cases_multiply_in_written_order(tmp_path):
    path = write_sweep(tmp_path, """
grid:
  seed: [0, 1]
zip:
  - {placement.rollout.tp: [1, 2], placement.rollout.gpu_memory_utilization: [0.5, 0.7]}
cases:
  - {schedule.load_balancer: round_robin}
  - {schedule.load_balancer: least_kv}
  - {schedule.load_balancer: work_stealing}
""")
    expansion = expand(load_sweep(path))
    assert len(expansion.points) == 2 * 2 * 3
    first, second, fourth = expansion.points[0], expansion.points[1], expansion.points[3]
    assert first.overrides == {"seed": 0, "placement.rollout.tp": 1, "placement.rollout.gpu_memory_utilization": 0.5,
                               "schedule.load_balancer": "round_robin"}
    assert second.overrides["schedule.load_balancer"] == "least_kv"  # the last axis varies fastest
    assert fourth.overrides["placement.rollout.tp"] == 2 and fourth.overrides["placement.rollout.gpu_memory_utilization"] == 0.7
    assert [p.scenario.seed for p in expansion.points] == [0] * 6 + [1] * 6
    assert all(p.scenario.run.steps == 1 for p in expansion.points)  # `set` applies to every point
    assert len({p.id for p in expansion.points}) == 12
    assert load_sweep(path).axis_paths == ("seed", "placement.rollout.tp", "placement.rollout.gpu_memory_utilization",
                                           "schedule.load_balancer")


def test_derived_values_and_constraints(tmp_path):
    path = write_sweep(tmp_path, """
grid:
  placement.rollout.gpus: [2, 3, 4, 6]
  placement.rollout.tp: [1, 2]
cases:
  - {placement.mode: disaggregated, schedule.mode: one_step_off}
derived:
  placement.training.gpus: "cluster.pools[0].nodes * 8 - placement.rollout.gpus"
constraints:
  - "placement.rollout.gpus % placement.rollout.tp == 0"
  - "placement.training.gpus >= 4"
""")
    expansion = expand(load_sweep(path))
    kept = [(p.scenario.placement.rollout.gpus, p.scenario.placement.rollout.tp) for p in expansion.points]
    assert kept == [(2, 1), (2, 2), (3, 1), (4, 1), (4, 2)]  # 6 leaves 2 training GPUs; 3 is not whole tp-2 engines
    assert expansion.skipped == 3
    for point in expansion.points:
        assert point.scenario.placement.training.gpus == 8 - point.scenario.placement.rollout.gpus
        assert point.overrides["placement.training.gpus"] == point.scenario.placement.training.gpus


def test_combinations_that_resolve_to_the_same_scenario_run_once(tmp_path):
    # A colocated placement's training GPUs follow its rollout GPUs, so setting them to that value changes nothing.
    path = write_sweep(tmp_path, "cases:\n  - {placement.training.gpus: 8}\n  - {run.warmup_steps: 0}\n")
    expansion = expand(load_sweep(path))
    assert len(expansion.points) == 1 and expansion.duplicates == 1


def test_ids_hash_the_resolved_scenario_wherever_the_files_are(tmp_path):
    body = "grid:\n  seed: [0, 1]\n"
    one, two = tmp_path / "one", tmp_path / "two" / "deeper"
    one.mkdir()
    two.mkdir(parents=True)
    ids = [tuple(p.id for p in expand(load_sweep(write_sweep(folder, body))).points) for folder in (one, two)]
    assert ids[0] == ids[1]
    again = expand(load_sweep(write_sweep(one, body)))
    assert tuple(p.id for p in again.points) == ids[0]
    assert point_id(again.points[0].scenario, one) != point_id(again.points[1].scenario, one)
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids[0])


def test_inline_base_scenario(tmp_path):
    base = QUICKSTART.read_text().replace("\n", "\n  ")
    path = tmp_path / "inline.yaml"
    path.write_text(f"name: inline\nbase:\n  {base}\ngrid:\n  placement.rollout.tp: [1, 2]\n")
    spec = load_sweep(path)
    assert spec.name == "inline"
    assert [p.scenario.placement.rollout.tp for p in expand(spec).points] == [1, 2]


@pytest.mark.parametrize("body, line, words", [
    ("gird:\n  seed: [0, 1]\n", 3, "unknown section 'gird'"),
    ("zip:\n  - {seed: [0, 1], placement.rollout.tp: [1]}\n", 4, "equal lengths"),
    ("grid:\n  seed: []\n", 4, "non-empty list"),
    ("derived:\n  seed: \"__import__('os').getpid()\"\n", 4, "is not allowed"),
    ("constraints:\n  - \"seed >\"\n", 4, "not an expression"),
    ("constraints:\n  - \"no.such.field > 1\"\n", 4, "no.such.field has no value"),
    ("grid:\n  placement.rollout.tp: [1, 3]\n", 4, "add a constraint"),
    ("grid:\n  placement.rollout.tpp: [1, 2]\n", 4, "unknown field 'tpp'"),
])
def test_bad_sweep_files_name_the_line(tmp_path, body, line, words):
    path = write_sweep(tmp_path, body)
    with pytest.raises(ScenarioError) as raised:
        expand(load_sweep(path))
    problem = raised.value.first
    assert problem.file == str(path) and problem.line == line, raised.value.render()
    assert words in raised.value.render()


def test_missing_base_file(tmp_path):
    path = write_sweep(tmp_path, "", base="nowhere.yaml")
    with pytest.raises(ScenarioError, match="cannot read the base scenario: no such file"):
        load_sweep(path)


def test_the_command_reports_a_bad_sweep_without_a_traceback(tmp_path, capsys):
    path = write_sweep(tmp_path, "grid:\n  placement.rollout.tp: [1, 3]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4: placement.rollout.tp" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing is written before every point is valid


def test_expressions():
    values = {("a",): 6, ("b", "c"): 4, ("pools", 0, "n"): 2}
    lookup = values.__getitem__
    assert Expression.parse("a - b.c").evaluate(lookup) == 2
    assert Expression.parse("pools[0].n * 8 // 3").evaluate(lookup) == 5
    assert Expression.parse("max(a, b.c) if a > 1 and not b.c == 5 else 0").evaluate(lookup) == 6
    assert Expression.parse("a in [1, 6]").evaluate(lookup) is True
    assert Expression.parse("1 < b.c <= a").evaluate(lookup) is True
    assert Expression.parse("ceil(a / b.c)").evaluate(lookup) == 2
    for bad in ("a.__class__()", "open('x')", "[x for x in a]", "lambda: 1", "a[b]"):
        with pytest.raises(ExpressionError):
            Expression.parse(bad)
    with pytest.raises(ExpressionError, match="division by zero"):
        Expression.parse("a / 0").evaluate(lookup)


def test_point_ids_stay_text_when_they_read_as_numbers(tmp_path):
    # Hex ids such as 24e1133996961176 or 0123 parse as numbers; the table must give them back as written.
    path = tmp_path / "results.csv"
    path.write_text("point,status,seed,step_s,error\n24e1133996961176,ok,1,5.5,\n0123,failed,2,,boom\n")
    rows = read_csv_rows(path)
    assert [r["point"] for r in rows] == ["24e1133996961176", "0123"]
    assert rows[0]["seed"] == 1 and rows[0]["step_s"] == 5.5 and rows[0]["error"] is None
    assert rows[1]["step_s"] is None and rows[1]["error"] == "boom"


@pytest.mark.parametrize(("text", "says"), [
    ("9**9**9", "too large a number"), ("'a' * 10**10", "more than 100,000 items"),
    ("[1] * 10**9", "more than 100,000 items"), ("1 + " * 400 + "1", "longer than 1000 characters"),
    ("1" + " + 1" * 60, "nested more than 40 levels"),
])
def test_an_expression_that_would_hang_or_fill_memory_is_refused_at_once(text, says):
    """Issue 35: sweep expressions are bounded in time, size and depth, and still never execute code."""
    with pytest.raises(ExpressionError, match=says):
        Expression.parse(text).evaluate(lambda path: 1)


def test_bounded_expressions_still_compute_what_sweeps_need():
    assert Expression.parse("2 ** 20 + 3 * 4").evaluate(lambda path: 0) == 2**20 + 12
    assert Expression.parse("'tp' * 2").evaluate(lambda path: 0) == "tptp"


def test_a_sweep_of_more_points_than_any_run_needs_is_refused_before_expanding(tmp_path, capsys):
    """Issue 35: a grid of 10^21 combinations used to be expanded one scenario at a time without end."""
    base = Path("scenarios/quickstart.yaml").resolve()
    values = "[" + ", ".join(str(v) for v in range(1, 1001)) + "]"
    sweep = tmp_path / "huge.yaml"
    sweep.write_text(f"name: huge\nbase: {base}\ngrid:\n  seed: {values}\n  run.steps: {values}\n"
                     f"  algorithm.prompts_per_step: {values}\n")
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "1,000,000,000 combinations" in err and f"{sweep}:3" in err
    assert not (tmp_path / "out").exists()
