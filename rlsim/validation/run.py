"""Run validation cases: load each case's scenario with its overrides, simulate it when a figure needs a run, and
read every published figure's simulated counterpart."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from itertools import repeat
from pathlib import Path

from rlsim.api import load_scenario, simulate, with_
from rlsim.config.run_length import fill_steps
from rlsim.config.schema import Scenario
from rlsim.errors import Problem, ScenarioError
from rlsim.loading import closest
from rlsim.validation.cases import MEASURED_STEPS, Case, Manifest, load_manifest, scenario_path
from rlsim.validation.figures import kind_of, read_figure
from rlsim.validation.table import FigureRow, Validation, compare_pairs


@dataclass(frozen=True)
class CaseRun:
    case: str
    rows: tuple[FigureRow, ...]
    host_seconds: float


def case_scenario(manifest_path: str | Path, case: Case, measured_steps: int = MEASURED_STEPS,
                  probe: Mapping[str, object] | None = None) -> Scenario:
    """The case's scenario with its overrides, then the `probe` overrides (`rlsim validate --set`: the same change to
    every case, to see how an open assumption moves the errors). Unless the case or the probe sets the steps, a run
    whose generation may work ahead of training is lengthened to warm up for its pipeline's fill (`fill_steps`), then
    measure `measured_steps`."""
    probe = dict(probe or {})
    scenario = load_scenario(scenario_path(manifest_path, case), {**case.overrides, **probe})
    warmup = fill_steps(scenario.schedule)
    steps_set = case.steps is not None or case.warmup_steps is not None or {"run.steps", "run.warmup_steps"} & set(probe)
    if not warmup or steps_set:
        return scenario
    return with_(scenario, {"run.steps": warmup + measured_steps, "run.warmup_steps": warmup})


def run_case(manifest_path: str | Path, case: Case, measured_steps: int = MEASURED_STEPS,
             probe: Mapping[str, object] | None = None) -> CaseRun:
    """Simulate one case (only if one of its figures needs a run) and read its figures."""
    started = time.perf_counter()
    scenario = case_scenario(manifest_path, case, measured_steps, probe)
    needs_run = any(kind_of(f.figure).needs_run for f in case.figures)
    result = simulate(scenario) if needs_run else None
    rows = tuple(FigureRow(case=case.name, group=case.group, figure=f.figure, unit=kind_of(f.figure).unit,
                           inputs=case.inputs, published=f.published, simulated=read_figure(f.figure, scenario, result),
                           is_time=kind_of(f.figure).is_time, note=f.note)
                 for f in case.figures)
    return CaseRun(case.name, rows, time.perf_counter() - started)


def select_cases(manifest: Manifest, names: list[str] | None) -> list[Case]:
    """The cases named (a case's name or its group, e.g. V3, in any letter case), in manifest order; all when `names`
    is empty."""
    if not names:
        return list(manifest.cases)
    known = [c.name for c in manifest.cases] + sorted({c.group for c in manifest.cases})
    wanted = {n.casefold() for n in names}
    unknown = [n for n in names if n.casefold() not in {k.casefold() for k in known}]
    if unknown:
        raise ScenarioError([Problem(f"no validation case or group named {n!r}", file="--case", value=n,
                                     suggestion=closest(n, known), valid=", ".join(known)) for n in unknown])
    return [c for c in manifest.cases if c.name.casefold() in wanted or c.group.casefold() in wanted]


def check_probe(manifest_path: str | Path, cases: list[Case], probe: Mapping[str, object]) -> None:
    """Resolve every case's scenario with the probe before anything runs, so a probe that does not fit some case
    fails at once, naming each case it breaks, instead of after minutes of simulation."""
    # The same problem in several cases is reported once, naming them all (keyed by its text: a value may be a list).
    broken: dict[str, tuple[Problem, list[str]]] = {}
    for case in cases:
        try:
            case_scenario(manifest_path, case, probe=probe)
        except ScenarioError as err:
            for problem in err.problems:
                broken.setdefault(problem.render(), (problem, []))[1].append(case.name)
    if broken:
        raise ScenarioError([replace(p, message=f"{p.message} (validation case{'s' if len(names) > 1 else ''} "
                                                f"{', '.join(names)})") for p, names in broken.values()])


def _runs(manifest_path: str | Path, cases: list[Case], jobs: int, probe: Mapping[str, object]) -> Iterator[CaseRun]:
    if jobs > 1 and len(cases) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            yield from pool.map(run_case, repeat(manifest_path), cases, repeat(MEASURED_STEPS), repeat(probe))
    else:
        for case in cases:
            yield run_case(manifest_path, case, probe=probe)


def run_validation(manifest_path: str | Path, names: list[str] | None = None, jobs: int = 1,
                   on_case: Callable[[CaseRun], None] | None = None,
                   probe: Mapping[str, object] | None = None) -> Validation:
    """Run the selected cases (in `jobs` processes; results do not depend on it) and compare their figures;
    `on_case` hears of each case as it completes, in manifest order. `probe`: overrides applied to every case on top
    of its own (see `case_scenario`), checked against every case before any runs."""
    manifest = load_manifest(manifest_path)
    cases = select_cases(manifest, names)
    probe = dict(probe or {})
    if probe:
        check_probe(manifest_path, cases, probe)
    runs = []
    for run in _runs(manifest_path, cases, jobs, probe):
        runs.append(run)
        if on_case is not None:
            on_case(run)
    rows = tuple(row for run in runs for row in run.rows)
    return Validation(rows=rows, pairs=compare_pairs(manifest, rows),
                      host_seconds={run.case: run.host_seconds for run in runs})

