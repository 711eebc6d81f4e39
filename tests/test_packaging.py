"""An installed rlsim carries what it reads at run time: the hardware profiles, the validation cases, and the example
scenarios and sweeps with the traces they replay."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_profiles_validation_cases_and_examples(tmp_path):
    # What a wheel carries does not depend on whether its engine is compiled, so this build skips the mypyc compile
    # (~1.5 min of the suite's CPU on a 2-core machine); tests/test_compiled_wheel.py builds and runs the compiled one.
    pure_python = {**os.environ, "RLSIM_PURE_PYTHON": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True, env=pure_python)
    [wheel] = tmp_path.glob("rlsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "rlsim/_shipped/hardware_profiles/h100-sxm.yaml" in names
    cases = {p.name for p in (ROOT / "scenarios" / "validation").iterdir()}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("rlsim/_shipped/validation/")} == cases
    # The examples keep their places relative to each other, so `../traces/...` and `base: ../quickstart.yaml` resolve.
    examples = [*(ROOT / "scenarios").glob("*.yaml"), *(ROOT / "scenarios" / "sweeps").glob("*.yaml"),
                *(p for p in (ROOT / "traces").rglob("*") if p.is_file())]
    missing = {f"rlsim/_shipped/{p.relative_to(ROOT).as_posix()}" for p in examples} - names
    assert len(examples) > 20 and not missing
