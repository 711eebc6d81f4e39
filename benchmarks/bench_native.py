"""What the compiled engine buys a user: one production step (bench_step's scenario, ×1 and ×4 lengths) on this checkout
interpreted, and on the wheel `pip install .` builds from it, whose engine hatch_build.py compiles to C with mypyc.
Prints how long building the wheel took, CPU and wall time of each, fast against exact on the compiled wheel, and
whether the two give the same metrics.json, byte for byte; asserts nothing.

Why: the per-step targets of issue 36 are missed, and the cost is neither SimPy's events nor one hot function — it is
the Python work of booking ~50k-100k boundaries a step (admissions, prefill iterations, preemptions, finishes), spread
flat (docs/simulation.md, "What a step costs the simulator, and where"). Compiling the modules that do that work,
unchanged, is the lever this measures, on the same build a user installs.
The wheel is built by pip (build isolation fetches hatchling, mypy and setuptools; a C compiler is needed) into a
temporary folder and unpacked there; nothing is installed. Each figure is the best of three runs after an untimed one,
in a process of its own, the two trees alternated; fast and exact are paired in one process, as bench_step does.

    python -m benchmarks.bench_native [--rounds 2] [--pairs 1] [--skip-exact] [--wheel FILE]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]

# sys.argv: the folders to import from (the unpacked wheel before the checkout, whose benchmarks/ it still uses), the
# lengths (x1, x4), and how many fast/exact pairs to run after (0: none).
CHILD = """
import hashlib, json, sys
sys.path[:0] = sys.argv[1].split("|")
from benchmarks.bench_step import LONGER, SCENARIO, run_once
import rlsim
from rlsim.compiled_engine import engine_build
from rlsim.report.run_folder import metrics_json
overrides = LONGER if sys.argv[2] == "x4" else {}
run_once(overrides, "fast")
runs = [run_once(overrides, "fast") for _ in range(3)]
metrics = metrics_json(rlsim.simulate(rlsim.load_scenario(SCENARIO, overrides)).metrics)
result = {"wall": min(r[0] for r in runs), "cpu": min(r[1] for r in runs), "events": runs[-1][2].events,
          "engine": engine_build(), "rlsim": rlsim.__file__, "metrics": hashlib.sha256(metrics.encode()).hexdigest()}
pairs = [(run_once(overrides, "fast")[1], run_once(overrides, "exact")[1]) for _ in range(int(sys.argv[3]))]
if pairs:
    result["paired_fast"], result["paired_exact"] = min(p[0] for p in pairs), min(p[1] for p in pairs)
print(json.dumps(result))
"""


def build_wheel(into: Path) -> tuple[Path, float]:
    """The wheel `pip install .` would install, built from this checkout; and the seconds the build took."""
    began = time.perf_counter()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(into)],
                           capture_output=True, text=True)
    if built.returncode:
        raise SystemExit(f"pip could not build the wheel:\n{built.stderr}")
    return next(into.glob("rlsim-*.whl")), time.perf_counter() - began


def unpack(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into)
    return into


def measure(paths: list[Path], scale: str, pairs: int = 0) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, "|".join(map(str, paths)), scale, str(pairs)], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds per tree (default 2)")
    parser.add_argument("--pairs", type=int, default=1, help="fast/exact pairs on the compiled wheel (default 1)")
    parser.add_argument("--skip-exact", action="store_true", help="skip the slow exact-mode reference")
    parser.add_argument("--wheel", type=Path, help="time this wheel instead of building one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlsim-native-") as scratch:
        if args.wheel:
            wheel = args.wheel
        else:
            wheel, seconds = build_wheel(Path(scratch) / "wheel")
            print(f"built {wheel.name} in {seconds:.0f} s (pip wheel ., the engine compiled by mypyc)")
        site = unpack(wheel, Path(scratch) / "site")
        trees = {"interpreted": [ROOT], "compiled": [site, ROOT]}
        for scale in ("x1", "x4"):
            best: dict[str, dict] = {}
            for _ in range(args.rounds):
                for label, paths in trees.items():
                    run = measure(paths, scale)
                    if label not in best or run["cpu"] < best[label]["cpu"]:
                        best[label] = run
            plain, native = best["interpreted"], best["compiled"]
            if native["engine"] != "compiled" or not native["rlsim"].startswith(str(site)):
                print(f"the wheel's engine did not load compiled ({native['engine']}, from {native['rlsim']}): its "
                      "figures are the interpreter's")
            print(f"{scale}: interpreted {plain['cpu']:.3f} s CPU ({plain['wall']:.3f} s wall), compiled "
                  f"{native['cpu']:.3f} s CPU ({native['wall']:.3f} s wall): {plain['cpu'] / native['cpu']:.2f}× "
                  f"faster; {plain['events']:,} events; metrics.json "
                  f"{'identical' if plain['metrics'] == native['metrics'] else 'DIFFERENT'}")
        if not args.skip_exact:
            paired = measure(trees["compiled"], "x1", args.pairs)
            print(f"compiled, paired in one process: fast {paired['paired_fast']:.3f} s CPU, exact "
                  f"{paired['paired_exact']:.2f} s CPU: fast is {paired['paired_exact'] / paired['paired_fast']:.0f}× "
                  "faster than exact")


if __name__ == "__main__":
    main()
