"""The `rlsim` command: check on every shipped scenario, schema, version, and bad input in a real process."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsim import __version__
from rlsim.cli import build_parser, main
from rlsim.cli.exitcodes import CLOSED_PIPE
from rlsim.config.schema import Scenario, scenario_json_schema

ROOT = Path(__file__).parents[1]
SHIPPED = sorted(ROOT.glob("scenarios/*.yaml"))


def test_there_are_example_scenarios():
    assert len(SHIPPED) >= 3


@pytest.mark.parametrize("scenario", SHIPPED, ids=[p.name for p in SHIPPED])
def test_check_accepts_every_shipped_scenario(scenario, capsys):
    assert main(["check", str(scenario)]) == 0
    out = capsys.readouterr().out
    for heading in ("cluster", "model", "placement", "framework  engine CPU 1.5 ms per step", "memory per GPU"):
        assert heading in out
    # vLLM engines pay the CPU step between GPU steps; SGLang's overlap scheduler hides it.
    assert ("overlapped with the GPU" in out) == ("engine: sglang" in scenario.read_text())
    assert "DOES NOT FIT" not in out and "warning" not in out
    assert out.count("fits") >= 2


def test_check_reports_a_configuration_that_does_not_fit(tmp_path, capsys):
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    text = text.replace("model: Qwen2.5-1.5B", "model: Qwen2.5-72B")
    path = tmp_path / "big.yaml"
    path.write_text(text)
    assert main(["check", str(path)]) == 3
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out
    assert "would fit with" in out


def idle_gpus_scenario(tmp_path) -> Path:
    """The quickstart's colocated 8-GPU placement on a cluster of two 8-GPU nodes."""
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    assert "nodes: 1" in text
    path = tmp_path / "idle.yaml"
    path.write_text(text.replace("nodes: 1", "nodes: 2"))
    return path


def test_check_warns_of_gpus_a_colocated_placement_leaves_idle(tmp_path, capsys):
    assert main(["check", str(idle_gpus_scenario(tmp_path))]) == 0
    captured = capsys.readouterr()
    [warning] = [line for line in captured.out.splitlines() if line.startswith("warning")]
    assert "cluster.pools[0].nodes" in warning and "use 8 of the 16 GPUs of pool 'main'" in warning
    assert "sit idle" in warning and captured.err == ""


def test_run_prints_the_idle_gpus_warning_once_on_stderr(tmp_path, capsys):
    # --steps loads the scenario twice; the warning still shows once.
    assert main(["run", str(idle_gpus_scenario(tmp_path)), "--steps", "2", "--out", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("warning: ") == 1 and "8 sit idle" in captured.err
    assert "warning" not in captured.out


def test_run_refuses_a_configuration_that_does_not_fit(tmp_path, capsys):
    # Real GPUs would not start it, so neither does the simulation: exit 3, the role, and what would fit.
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text().replace("model: Qwen2.5-1.5B", "model: Qwen2.5-72B")
    path = tmp_path / "big.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 3
    err = capsys.readouterr().err
    assert "does not fit in GPU memory" in err and "would fit with" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_schema_is_json_schema_of_the_scenario(capsys, tmp_path):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["properties"]) == set(Scenario.model_fields)
    assert schema["additionalProperties"] is False
    [name] = [option for option in schema["properties"]["model"]["anyOf"] if option.get("type") == "string"]
    assert "Hugging Face id" in name["description"] and "config.json" in name["description"]
    out = tmp_path / "s.json"
    assert main(["schema", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == schema


def test_every_schema_property_has_a_description():
    # Editors show these on hover and completion: a field without one leaves a user guessing its meaning and unit.
    schema = scenario_json_schema()
    owners = {"Scenario": schema, **schema["$defs"]}
    bare = [f"{owner}.{name}" for owner, definition in owners.items()
            for name, prop in definition.get("properties", {}).items() if not prop.get("description", "").strip()]
    assert sum(len(d.get("properties", {})) for d in owners.values()) > 200
    assert bare == []


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert __version__ in out and ("engine compiled" in out or "engine interpreted" in out)


def test_bad_input_in_a_real_process_prints_no_traceback(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text((ROOT / "scenarios" / "quickstart.yaml").read_text().replace("mini_batches", "mini_batchs"))
    result = subprocess.run([sys.executable, "-m", "rlsim", "check", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2
    assert "algorithm.mini_batchs" in lines[0] and "did you mean 'mini_batches'" in lines[1]


@pytest.mark.parametrize("command", ["check scenarios/quickstart.yaml", "schema", "--help"])
def test_output_piped_into_head_prints_no_traceback(command):
    result = subprocess.run(f"{sys.executable} -m rlsim {command} | head -1", shell=True, cwd=ROOT, capture_output=True,
                            text=True)
    assert result.stdout.strip() and result.stderr == ""


@pytest.mark.parametrize("command", [["check", "scenarios/quickstart.yaml"], ["schema"]])
def test_a_reader_that_is_gone_ends_the_command_quietly(command):
    # `head` may read everything before it exits; a pipe whose read end is already closed fails every write.
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "rlsim", *command], cwd=ROOT, stdout=write, stderr=subprocess.PIPE,
                                text=True)
    finally:
        os.close(write)
    assert result.returncode == CLOSED_PIPE
    assert result.stderr == ""


HEAVY = ("simpy", "plotly", "numpy", "scipy", "pydantic", "networkx")


def subcommands() -> list[str]:
    [choices] = [a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(choices)


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in subcommands())], ids=" ".join)
def test_help_loads_no_simulator_numpy_pydantic_or_plotly(argv):
    # A fresh process: this one has imported everything already.
    code = (f"import sys\nfrom rlsim.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(' '.join(sorted(set({HEAVY!r}) & set(sys.modules))), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "usage: rlsim" in result.stdout
    assert result.stderr.strip() == ""


def test_missing_file_is_bad_input(capsys):
    assert main(["check", "no/such/file.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_plan_and_validate_use_the_cores_other_processes_leave(monkeypatch):
    """Issue 36: by default they run on every core not already busy, at least one (results never depend on it)."""
    from rlsim.cli import cores

    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (2.6, 0.0, 0.0))
    assert cores.free_cores() == 5
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (30.0, 0.0, 0.0))
    assert cores.free_cores() == 1
    parser = build_parser()
    assert parser.parse_args(["validate"]).jobs is None and parser.parse_args(["plan", "x.yaml", "--gpus", "8"]).workers is None
