"""An installed rlsim carries what it reads at run time: the hardware profiles and the validation cases."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_profiles_and_validation_cases(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("rlsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "rlsim/_shipped/hardware_profiles/h100-sxm.yaml" in names
    cases = {p.name for p in (ROOT / "scenarios" / "validation").iterdir()}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("rlsim/_shipped/validation/")} == cases
