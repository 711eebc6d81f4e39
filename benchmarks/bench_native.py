"""What compiling the engine would buy: one production step (bench_step's scenario, ×1 and ×4 lengths) on this checkout
as it is, and on a scratch copy whose engine modules are compiled to C by mypyc from the same source. Prints CPU and
wall time of each and whether the two give the same metrics.json, byte for byte; asserts nothing.

Why: the per-step targets of issue 36 are missed, and the cost is neither SimPy's events nor one hot function — it is
the Python work of booking ~60k boundaries a step (admissions, preemptions, finishes, samples), spread flat. Cutting
events alone does not help: planning a readmission together with the stretch after it removed 22 % of a step's events
and saved no CPU (callgrind +1 %). Compiling the modules that do that work, unchanged, is the lever this measures.
Needs mypy (in the test extra) and a C compiler; the copy is built in a temporary folder (about a minute) and removed.
Each figure is the best of three runs after an untimed one, in a process of its own, the two trees alternated.

    python -m benchmarks.bench_native [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).parents[1]
# The engine and what it calls per boundary: typed throughout, no numpy in their signatures (mypyc rejects the
# cost model's int-or-array token counts).
COMPILED = ("rlsim/sim/rollout.py", "rlsim/sim/sequence.py", "rlsim/sim/prefill.py", "rlsim/sim/static_batch.py",
            "rlsim/sim/engine/*.py")

BUILD = """
import glob, sys
from setuptools import setup
from mypyc.build import mypycify
modules = sorted(path for pattern in sys.argv[1:] for path in glob.glob(pattern))
sys.argv[1:] = ["build_ext", "--inplace", "--quiet"]
setup(name="rlsim-native-benchmark", packages=[], py_modules=[], ext_modules=mypycify(modules, opt_level="3"))
"""

CHILD = """
import hashlib, json, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.bench_step import LONGER, SCENARIO, run_once
import rlsim
from rlsim.report.run_folder import metrics_json
overrides = LONGER if sys.argv[2] == "x4" else {}
run_once(overrides, "fast")
runs = [run_once(overrides, "fast") for _ in range(3)]
metrics = metrics_json(rlsim.simulate(rlsim.load_scenario(SCENARIO, overrides)).metrics)
print(json.dumps({"wall": min(r[0] for r in runs), "cpu": min(r[1] for r in runs), "events": runs[-1][2].events,
                  "compiled": sys.modules["rlsim.sim.rollout"].__file__.endswith(".so"),
                  "metrics": hashlib.sha256(json.dumps(metrics, sort_keys=True).encode()).hexdigest()}))
"""


def build_copy(into: Path) -> Path:
    """A copy of the package and benchmarks with the engine modules compiled in place."""
    copy = into / "checkout"
    for part in ("rlsim", "benchmarks", "scenarios", "hardware_profiles", "traces"):
        if (ROOT / part).exists():
            shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")  # mypy's settings, which mypyc type-checks by
    built = subprocess.run([sys.executable, "-c", BUILD, *COMPILED], cwd=copy, capture_output=True, text=True)
    if built.returncode:
        raise SystemExit(f"mypyc could not build the engine modules (mypy installed? a C compiler?):\n{built.stderr}")
    return copy


def measure(tree: Path, scale: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), scale], cwd=tree, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds per tree (default 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlsim-native-") as scratch:
        compiled = build_copy(Path(scratch))
        for scale in ("x1", "x4"):
            best: dict[str, dict] = {}
            for _ in range(args.rounds):
                for label, tree in (("interpreted", ROOT), ("compiled", compiled)):
                    run = measure(tree, scale)
                    if label not in best or run["cpu"] < best[label]["cpu"]:
                        best[label] = run
            plain, native = best["interpreted"], best["compiled"]
            if not native["compiled"]:
                print("the copy's engine did not load compiled: its figures are the interpreter's")
            print(f"{scale}: interpreted {plain['cpu']:.3f} s CPU ({plain['wall']:.3f} s wall), compiled "
                  f"{native['cpu']:.3f} s CPU ({native['wall']:.3f} s wall): {plain['cpu'] / native['cpu']:.2f}× "
                  f"faster; {plain['events']:,} events; metrics.json "
                  f"{'identical' if plain['metrics'] == native['metrics'] else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
