"""`--set PATH=VALUE` on every subcommand that reads a scenario: one parser, one help text, the override applied, and
mistakes reported against the `--set` argument rather than a line of the scenario file."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from rlsim.cli import build_parser, main
from rlsim.cli.overrides import HELP, parse_overrides
from rlsim.errors import ScenarioError

ROOT = Path(__file__).parents[1]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")
COMMANDS = ("check", "estimate", "run", "plan", "sweep", "validate")
# A step of a few sequences: every simulation below takes well under a second.
SMALL = ["--set", "algorithm.prompts_per_step=8", "--set", "algorithm.samples_per_prompt=2"]


def _set_help(command: str) -> str:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return next(a.help for a in subparsers.choices[command]._actions if "--set" in a.option_strings)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_scenario_command_takes_set_with_the_same_help(command):
    assert _set_help(command) == HELP


def test_check_applies_set(capsys):
    assert main(["check", QUICKSTART, *SMALL]) == 0
    assert "8 prompts × 2 samples = 16 sequences/step" in capsys.readouterr().out


def test_estimate_applies_set(capsys):
    assert main(["estimate", QUICKSTART, "--json", "--set", "name=renamed"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"] == "renamed"


def test_run_applies_set(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", QUICKSTART, "--steps", "1", "--out", str(out), "--json", *SMALL]) == 0
    resolved = yaml.safe_load((out / "resolved.yaml").read_text())
    assert (resolved["algorithm"]["prompts_per_step"], resolved["algorithm"]["samples_per_prompt"]) == (8, 2)


def test_plan_applies_set_before_planning(capsys):
    assert main(["plan", QUICKSTART, "--gpus", "2", "--schedules", "sync", "--simulate", "1", "--refine", "0", "--layouts", "0",
                 "--steps", "2", "--workers", "1", "--json", *SMALL]) == 0
    [plan] = json.loads(capsys.readouterr().out)
    assert plan["workload"].startswith("Qwen2.5-1.5B GRPO: 8 prompts × 2 samples per step")


def _sweep(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {QUICKSTART}\nset: {{run.steps: 2, run.warmup_steps: 1, algorithm.samples_per_prompt: 4}}\n"
                    "grid:\n  placement.rollout.tp: [1, 2]\n")
    return path


def test_sweep_applies_set_to_every_point_after_the_files_own_set(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(_sweep(tmp_path)), "--out", str(out), *SMALL,
                 "--set", "run.steps=1", "--set", "run.warmup_steps=0"]) == 0
    points = sorted((out / "points").glob("*/resolved.yaml"))
    resolved = [yaml.safe_load(p.read_text()) for p in points]
    assert sorted(r["placement"]["rollout"]["tp"] for r in resolved) == [1, 2]  # the axis still varies
    assert all(r["algorithm"]["samples_per_prompt"] == 2 and r["run"]["steps"] == 1 for r in resolved)


def test_sweep_refuses_to_set_a_path_it_varies(tmp_path, capsys):
    assert main(["sweep", str(_sweep(tmp_path)), "--out", str(tmp_path / "out"), "--set", "placement.rollout.tp=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set placement.rollout.tp=4: the sweep varies placement.rollout.tp (line 4)")


def test_validate_applies_set_to_every_case(capsys):
    assert main(["validate", "--case", "v8", "--json", "--no-docs", "--set", "schedule.weight_sync.bucket_mib=64"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["probe"] == {"schedule.weight_sync.bucket_mib": 64} and {r["case"][:2] for r in out["rows"]} == {"v8"}


# ---- mistakes point at the --set argument ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "estimate", "run"])
def test_an_unknown_field_is_reported_against_the_set_argument(command, capsys):
    assert main([command, QUICKSTART, "--set", "algorithm.samples_per_promt=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set algorithm.samples_per_promt=4: unknown field 'samples_per_promt'\n")
    assert "did you mean 'samples_per_prompt'?" in err
    assert "quickstart.yaml" not in err and "Traceback" not in err


def test_an_invalid_value_is_reported_against_the_set_argument(capsys):
    assert main(["check", QUICKSTART, "--set", "model=Qwen3-8b-Instruct"]) == 2
    assert capsys.readouterr().err.startswith("error: --set model=Qwen3-8b-Instruct: unknown model 'Qwen3-8b-Instruct'")
    assert main(["check", QUICKSTART, "--set", "placement.rollout.tp=0"]) == 2
    assert capsys.readouterr().err.startswith("error: --set placement.rollout.tp=0: Input should be greater than 0")


def test_an_unknown_field_in_a_sweep_is_reported_against_the_set_argument(tmp_path, capsys):
    assert main(["sweep", str(_sweep(tmp_path)), "--out", str(tmp_path / "out"),
                 "--set", "algorithm.samples_per_promt=4"]) == 2
    assert capsys.readouterr().err.startswith("error: --set algorithm.samples_per_promt=4: unknown field")


def test_a_sweep_set_overrides_the_files_set_and_owns_its_errors(tmp_path, capsys):
    assert main(["sweep", str(_sweep(tmp_path)), "--out", str(tmp_path / "out"),
                 "--set", "algorithm.samples_per_prompt=0"]) == 2
    assert capsys.readouterr().err.startswith("error: --set algorithm.samples_per_prompt=0: Input should be greater")


@pytest.mark.parametrize(("item", "message"), [
    ("placement.rollout.gpus", "expected PATH=VALUE"),
    ("=4", "expected PATH=VALUE"),
    ("placement..gpus=4", "not a field path"),
    ("workload.reward={kind: rule", "VALUE is not YAML"),
])
def test_a_malformed_set_names_itself(item, message):
    with pytest.raises(ScenarioError, match=message) as err:
        parse_overrides([item])
    assert err.value.file.startswith("--set ")


def test_values_are_yaml():
    assert parse_overrides(["a.b=4", "c=[1, 2]", "d={kind: rule}", "e=true", "f=Qwen/Qwen3-8B"]) == {
        "a.b": 4, "c": [1, 2], "d": {"kind": "rule"}, "e": True, "f": "Qwen/Qwen3-8B"}


def test_a_number_with_an_exponent_is_a_number():
    """YAML 1.1 reads 1e-9 as text (it wants 1.0e-9); typed after --set it is meant as the number, and past a float's
    range it is infinite, which the field then refuses."""
    assert parse_overrides(["a=1e-9", "b=2E3", "c=-1.5e+2", "d=1e400", "e=release-1e3"]) == {
        "a": 1e-9, "b": 2000.0, "c": -150.0, "d": float("inf"), "e": "release-1e3"}


def test_set_reaches_a_field_beside_a_shorthand_model_name(capsys):
    """`model: Qwen2.5-1.5B` is `model: {name: Qwen2.5-1.5B}`, so `--set model.dtype=fp8` sets the rollout precision
    beside the name instead of failing on a scalar."""
    assert main(["check", QUICKSTART, "--set", "model.dtype=fp8"]) == 0
    out = capsys.readouterr().out
    assert "Qwen2.5-1.5B" in out and "rollout weights fp8" in out
