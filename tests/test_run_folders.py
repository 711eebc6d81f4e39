"""Issue 35, run folders: the scenario's name is the user's text, so it becomes one safe folder name under runs/;
a --out that cannot be a run folder is refused before any simulation; a run folder is written whole or not at all."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.cli.run import run_folder_name

QUICKSTART = Path("scenarios/quickstart.yaml").resolve()


@pytest.mark.parametrize("name", ["../../escaped", "/etc/escaped", "..", ".hidden", "a/b\\c", "x" * 300, "é" * 200])
def test_a_scenario_name_becomes_one_folder_name(name):
    folder = run_folder_name(name, {})
    assert "/" not in folder and "\\" not in folder and not folder.startswith(".")
    assert 0 < len(folder.encode()) <= 200
    assert Path("runs", folder).resolve().parent == Path("runs").resolve()
    assert "/" not in run_folder_name(name, {"placement.rollout.tp": 2})


def test_a_run_named_to_escape_stays_under_runs(tmp_path, monkeypatch):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(QUICKSTART.read_text().replace("name: quickstart", "name: ../../escaped", 1))
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(scenario), "--steps", "1"]) == 0
    assert not (tmp_path.parent / "escaped").exists()
    [folder] = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("_.._escaped")


def test_an_out_that_is_a_file_is_refused_before_simulating(tmp_path, capsys):
    existing = tmp_path / "metrics.txt"
    existing.write_text("keep me\n")
    assert main(["run", str(QUICKSTART), "--out", str(existing)]) == 2
    captured = capsys.readouterr()
    assert "is a file" in captured.err and "simulating" not in captured.out
    assert existing.read_text() == "keep me\n"
    assert main(["run", str(QUICKSTART), "--out", str(existing / "below")]) == 2
    assert "cannot make" in capsys.readouterr().err


def test_a_rerun_replaces_the_folder_whole(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(QUICKSTART), "--steps", "1", "--out", str(out)]) == 0
    (out / "left-over-from-before.txt").write_text("old")
    assert main(["run", str(QUICKSTART), "--steps", "1", "--out", str(out)]) == 0
    assert not (out / "left-over-from-before.txt").exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_killed_run_leaves_no_folder_that_looks_complete(tmp_path):
    """Killed while simulating or writing, a run leaves only its hidden staging folder, never runs/<name>."""
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "rlsim", "run", str(QUICKSTART), "--steps", "40", "--out",
                                str(out)], cwd=Path.cwd(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None and not any(tmp_path.iterdir()):
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if out.exists():  # it finished before the kill: then it is whole
        assert json.loads((out / "metrics.json").read_text())["step_time_s"]
        assert (out / "report.html").exists()
    for leftover in tmp_path.iterdir():
        assert leftover == out or leftover.name.startswith(".")
    os.sync()
