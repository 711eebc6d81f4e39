"""`rlsim example`: the shipped examples listed with a description, and each written out to run from anywhere."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.cli import main
from rlsim.config import load_scenario
from rlsim.examples import examples
from rlsim.sweep import expand, load_sweep

ROOT = Path(__file__).parents[1]
NAMES = sorted(e.name for e in examples())


def test_every_scenario_and_sweep_is_an_example_with_a_one_line_description(capsys):
    on_disk = {p.stem for p in (ROOT / "scenarios").glob("*.yaml")}
    on_disk |= {f"sweeps/{p.stem}" for p in (ROOT / "scenarios" / "sweeps").glob("*.yaml")}
    assert set(NAMES) == on_disk
    assert main(["example"]) == 0
    listed = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in listed] == [e.name for e in examples()]
    assert all(len(line.split(None, 1)) == 2 for line in listed)
    assert "Quick start: GRPO on Qwen2.5-1.5B" in "\n".join(listed)


@pytest.mark.parametrize("name", NAMES)
def test_a_written_example_runs_from_another_folder(name, tmp_path, monkeypatch, capsys):
    # The examples read traces and base scenarios by relative paths: written elsewhere, those must still resolve.
    monkeypatch.chdir(tmp_path)
    assert main(["example", name]) == 0
    written = tmp_path / f"{Path(name).name}.yaml"
    assert f"wrote {written.name}" in capsys.readouterr().out
    if name.startswith("sweeps/") and "base:" in written.read_text():
        assert expand(load_sweep(written)).points
    else:
        load_scenario(written)


def test_an_existing_file_is_kept_unless_forced(tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    out.write_text("my edits\n")
    assert main(["example", "quickstart", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "my edits\n"
    assert main(["example", "quickstart", "--out", str(out), "--force"]) == 0
    assert out.read_text() == (ROOT / "scenarios" / "quickstart.yaml").read_text()


def test_a_misspelt_name_suggests_the_example(capsys):
    assert main(["example", "quickstrat"]) == 2
    assert "did you mean 'quickstart'" in capsys.readouterr().err
