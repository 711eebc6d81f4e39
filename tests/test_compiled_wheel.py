"""The wheel `pip install .` builds runs the engine compiled by mypyc and gives the interpreted run's metrics.json, byte
for byte. Opt-in (RLSIM_TEST_NATIVE=1): building the wheel compiles the engine, a minute or more that the suite's
budget on CI's two cores does not have; benchmarks/bench_native.py builds the same wheel. Needs pip's build isolation
(hatchling, mypy, setuptools from the package index) and a C compiler."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The quick start, and an engine pool that prefills on engines of its own and fetches the KV cache (sim/prefill.py,
# sim/engine/kv_fetch.py): between them every compiled engine module runs.
SCENARIOS = ("quickstart.yaml", "qwen2.5-7b-agentic-pd-h800-prefill-h20-decode.yaml")

pytestmark = pytest.mark.skipif(os.environ.get("RLSIM_TEST_NATIVE") != "1",
                                reason="builds and compiles the wheel (a minute or more): set RLSIM_TEST_NATIVE=1")

RUN = """
import sys
sys.path.insert(0, sys.argv[1])
from rlsim.cli import main
raise SystemExit(main(["run", sys.argv[2], "--steps", "2", "--events", "none", "--out", sys.argv[3]]))
"""


def run_from(tree: Path, scenario: str, out: Path, cwd: Path) -> None:
    """`rlsim run` with the rlsim package found first in `tree`, from a folder that holds no other."""
    subprocess.run([sys.executable, "-c", RUN, str(tree), str(ROOT / "scenarios" / scenario), str(out)], cwd=cwd,
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": ""})


@pytest.fixture(scope="module")
def unpacked_wheel(tmp_path_factory) -> Path:
    scratch = tmp_path_factory.mktemp("wheel")
    env = {key: value for key, value in os.environ.items() if key != "RLSIM_PURE_PYTHON"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(scratch)],
                   check=True, capture_output=True, env=env)
    (wheel,) = scratch.glob("rlsim-*.whl")
    assert not wheel.name.endswith("-none-any.whl"), "the wheel came out pure Python: no compiled engine in it"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(scratch / "site")
    return scratch / "site"


IMPORT_EACH = """
import importlib, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from rlsim.compiled_engine import COMPILED_MODULES
for path in COMPILED_MODULES:
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    assert Path(module.__file__).is_file() and Path(module.__file__).suffix != ".py", (path, module.__file__)
"""


def test_each_compiled_module_imports_on_its_own_from_where_it_lies(unpacked_wheel, tmp_path):
    """A module loaded by mypyc's shared library gets the __file__ mypyc derives from where that library lies: right
    only at the top of site-packages. Each module is imported directly, the first one before anything else."""
    subprocess.run([sys.executable, "-c", IMPORT_EACH, str(unpacked_wheel)], cwd=tmp_path, check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": ""})


AS_INTERPRETED = """
import copy, pickle, sys
sys.path.insert(0, sys.argv[1])
import rlsim
from rlsim.compiled_engine import engine_build
assert engine_build() == "compiled"
result = rlsim.simulate(rlsim.load_scenario(sys.argv[2]))
again = pickle.loads(pickle.dumps(result))
assert again.metrics == result.metrics and copy.deepcopy(result.log.spans) == result.log.spans
sequences = result.log.sequences
assert sequences == list(sequences) and (sequences == 5) is False and sequences != 5
try:
    hash(sequences)
except TypeError:
    pass
else:
    raise AssertionError("a table of mutable arrays hashed")
"""


def test_compiled_classes_pickle_compare_and_refuse_a_hash_as_interpreted_ones(unpacked_wheel, tmp_path):
    """mypyc's native classes differ: a frozen dataclass unpickles by setting its fields (refused), and a function
    assigned as __eq__ in the class body is no method. The API's Result and its tables still pickle, copy and compare."""
    subprocess.run([sys.executable, "-c", AS_INTERPRETED, str(unpacked_wheel), str(ROOT / "scenarios" / SCENARIOS[0])],
                   cwd=tmp_path, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": ""})


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_compiled_wheel_gives_the_interpreted_metrics(unpacked_wheel, scenario, tmp_path):
    run_from(unpacked_wheel, scenario, tmp_path / "compiled", tmp_path)
    run_from(ROOT, scenario, tmp_path / "interpreted", tmp_path)
    assert json.loads((tmp_path / "compiled" / "timing.json").read_text())["engine"] == "compiled"
    assert json.loads((tmp_path / "interpreted" / "timing.json").read_text())["engine"] == "interpreted"
    compiled, interpreted = ((tmp_path / run / "metrics.json").read_bytes() for run in ("compiled", "interpreted"))
    assert compiled == interpreted


def compiled_tree(unpacked_wheel: Path, tree: Path) -> Path:
    """A copy of this checkout whose rlsim loads the wheel's compiled modules: each extension module beside its .py
    file (the one Python imports), mypyc's shared library at the tree's top (where the modules look for it)."""
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv*", "*.egg-info", "build",
                                                            "dist", ".pytest_cache", ".mypy_cache", ".ruff_cache"))
    for library in unpacked_wheel.rglob("*.so"):
        shutil.copy2(library, tree / library.relative_to(unpacked_wheel))
    return tree


def test_the_whole_suite_passes_against_the_compiled_engine(unpacked_wheel, tmp_path):
    """Every other test, run on the compiled engine: fast ≡ exact, the invariants, the golden metrics. The white-box
    tests that patch or subclass engine classes skip there (tests/interpreted_engine.py); so does the check that the
    checkout holds no compiled module, which this tree holds on purpose. Several minutes on two cores."""
    tree = compiled_tree(unpacked_wheel, tmp_path / "tree")
    env = {**{key: value for key, value in os.environ.items() if key != "RLSIM_TEST_NATIVE"}, "PYTHONPATH": ""}
    build = subprocess.run([sys.executable, "-c", "from rlsim.compiled_engine import engine_build; print(engine_build())"],
                           cwd=tree, check=True, capture_output=True, text=True, env=env)
    assert build.stdout.strip() == "compiled"
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "suite"),
         "--ignore", "tests/test_compiled_wheel.py",
         "--deselect", "tests/test_compiled_engine.py::test_the_source_tree_holds_no_compiled_module"],
        cwd=tree, capture_output=True, text=True, env=env)
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
