"""DESIGN.md's rules about who may import whom, checked on the source: only `sim/` imports simpy, only `report/`
imports plotly, `metrics/` never sees a SimPy object, the packages form layers with no upward import, and no two
modules import each other at import time.

Imports under `if TYPE_CHECKING:` are left out (they name types, they never run); imports inside functions count (they
run, later). A rule broken on purpose for now is listed in KNOWN_VIOLATIONS with why, so a new break fails the test
and so does a listed one that has gone (delete it from the list)."""
from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rlsim"

# Bottom to top: a unit (a top-level module or sub-package of rlsim) may import units of lower layers only; units
# sharing a layer may not import each other, except inside FOUNDATION.
# `rlsim` is the package's own __init__: its version, and public names it loads on first use (import_module).
FOUNDATION = {"rlsim", "errors", "registry", "fields", "yamlsource", "loading", "shipped", "exports", "progress",
              "examples", "compiled_engine"}
LAYERS: tuple[set[str], ...] = (
    FOUNDATION,
    # traces: the readers of trace files, which the loader checks at load time; overheads: measured constants that
    # the scenario's defaults and the cost models' plain values share; runlog: the readers of a training run's
    # per-step metrics (rlsim replay, rlsim fit)
    {"hardware", "models", "traces", "overheads", "runlog"},
    {"config"},
    {"importers"},  # framework configs (verl, NeMo-RL) translated into scenarios; read by the CLI only
    {"topology"},
    {"costs"},
    {"workload"},
    {"pricing"},  # the one place that turns the scenario's config classes into what the cost models take
    {"events"},
    {"sim", "estimate"},  # the simulation and the analytical model of the same step, each on its own
    {"metrics"},
    {"report"},
    {"api"},
    {"sweep", "calibrate", "replay"},
    {"plan", "validation"},
    {"cli"},
    {"__main__"},
)

# (importer unit, imported unit): why the rule is broken for now. Remove an entry once its import is gone.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    module: str  # importing module, dotted
    target: str  # imported module, dotted
    line: int
    at_import_time: bool  # at module level, not inside a function


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(path: Path) -> list[Import]:
    module = _module_name(path)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_block(child):
                continue
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, child.lineno, not in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append(Import(module, child.module, child.lineno, not in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


ALL_IMPORTS = [imp for path in sorted(PACKAGE.rglob("*.py")) for imp in _imports(path)]


def _unit(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "rlsim"


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _outside(imports: list[Import], library: str, allowed_unit: str) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target}" for i in imports
            if (i.target == library or i.target.startswith(library + ".")) and _unit(i.module) != allowed_unit]


def test_only_sim_imports_simpy():
    assert _outside(ALL_IMPORTS, "simpy", "sim") == []


def test_only_report_imports_plotly():
    assert _outside(ALL_IMPORTS, "plotly", "report") == []


def test_metrics_never_sees_a_simpy_object():
    into_simulation = [f"{i.module}:{i.line} imports {i.target}" for i in ALL_IMPORTS if _unit(i.module) == "metrics"
                       and (i.target.split(".")[0] == "simpy" or i.target.startswith("rlsim.sim"))]
    assert into_simulation == []


def test_the_cost_models_take_plain_values_not_the_scenario():
    """`costs` prices layouts it owns (rlsim.costs.layout); only `pricing` reads the scenario's config classes for it."""
    into_config = [f"{i.module}:{i.line} imports {i.target}" for i in ALL_IMPORTS
                   if _unit(i.module) == "costs" and i.target.startswith("rlsim.config")]
    assert into_config == []


def test_every_unit_has_a_layer():
    units = {_unit(_module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert units - set().union(*LAYERS) == set()


def layer_violations(imports: list[Import]) -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> where, for every import that goes up a layer or across one."""
    broken: dict[tuple[str, str], list[str]] = {}
    for i in imports:
        if not i.target.startswith("rlsim.") and i.target != "rlsim":
            continue
        source, target = _unit(i.module), _unit(i.target)
        if source == target or (source in FOUNDATION and target in FOUNDATION):
            continue
        if _layer(target) >= _layer(source):
            broken.setdefault((source, target), []).append(f"{i.module}:{i.line} imports {i.target}")
    return broken


def test_no_unit_imports_upward_or_across_its_layer():
    broken = layer_violations(ALL_IMPORTS)
    new = {pair: where for pair, where in broken.items() if pair not in KNOWN_VIOLATIONS}
    assert new == {}, "imports against DESIGN.md's layers (move the code down, or hand the value in)"
    assert set(KNOWN_VIOLATIONS) - set(broken) == set(), "fixed: delete from KNOWN_VIOLATIONS"


def test_no_modules_import_each_other_at_import_time():
    graph = nx.DiGraph()
    for i in ALL_IMPORTS:
        if i.at_import_time and i.target.startswith("rlsim.") and i.target != i.module:
            # `from rlsim.a import b` may name module rlsim.a.b; both are edges to modules that exist.
            graph.add_edge(i.module, i.target)
    modules = {_module_name(path) for path in PACKAGE.rglob("*.py")}
    graph.remove_nodes_from([n for n in list(graph) if n not in modules])
    # A package's __init__ re-exporting its own modules is not a cycle a reader has to follow.
    cycles = [c for c in nx.simple_cycles(graph) if not any(c[0].startswith(m + ".") or m.startswith(c[0] + ".")
                                                          for m in c[1:])]
    assert cycles == []


@pytest.mark.parametrize(("source", "imported", "rule"), [
    ("rlsim/metrics/extra.py", "import simpy", test_metrics_never_sees_a_simpy_object),
    ("rlsim/plan/extra.py", "import plotly.graph_objects as go", test_only_report_imports_plotly),
    ("rlsim/costs/extra.py", "from rlsim.sim.run import simulate_log", test_no_unit_imports_upward_or_across_its_layer),
])
def test_each_rule_fails_when_broken(source, imported, rule, monkeypatch):
    """Each check fails on a module that breaks it (parsed from text: nothing is written to the package)."""
    module = ".".join(Path(source).with_suffix("").parts)
    extra = [Import(module, alias, 1, True) for alias in _names(imported)]
    monkeypatch.setitem(globals(), "ALL_IMPORTS", [*ALL_IMPORTS, *extra])
    with pytest.raises(AssertionError):
        rule()


def _names(statement: str) -> list[str]:
    node = ast.parse(statement).body[0]
    return [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]


def _libraries_loaded_by(each_scenario: str) -> str:
    """Which of simpy and plotly a fresh interpreter has imported after running `each_scenario` (Python text with
    `path` bound) on every shipped scenario."""
    scenarios = sorted((PACKAGE.parent / "scenarios").glob("*.yaml"))
    code = ("import sys\nfrom rlsim.config import load_scenario\n"
            f"for path in {[str(p) for p in scenarios]!r}:\n    {each_scenario}\n"
            "print(sorted(m for m in ('simpy', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    return out.stdout.strip()


def test_loading_a_scenario_does_not_start_the_simulator():
    """The loader reads the registered policy names (rlsim.registry) without importing SimPy: `rlsim check` and
    `rlsim estimate` never load the simulator."""
    assert _libraries_loaded_by("load_scenario(path)") == "[]"


def test_estimating_a_step_does_not_start_the_simulator():
    """The estimate asks each schedule's registered facts (rlsim/sim/schedules/), whose files import their
    controllers only when a simulation builds one."""
    each = "from rlsim.config.bound import bind; from rlsim.estimate import estimate_step; " \
           "estimate_step(bind(load_scenario(path)))"
    assert _libraries_loaded_by(each) == "[]"
