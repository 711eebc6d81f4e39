"""`rlsim validate --sensitivity`: how much each open assumption moves each figure, case by case.

A source leaves some inputs open: the response lengths above all, the reward's cost, how slow the hosts' CPUs are
at the engines' and the driver's Python work. Each assumption here is one change, the same relative change for every
case it applies to, made on top of the case's own settings; a figure that barely moves under every change is a
robust conclusion, one that swings is only as good as the assumption behind it. An assumption that does not apply to
a case (a reward model has no CPU cost per sample) is left blank for it, never guessed.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

from rlsim.config.framework import HOST_CPU_TIMES
from rlsim.config.schema import Scenario
from rlsim.report.terminal import text_table
from rlsim.validation.cases import Case, load_manifest
from rlsim.validation.run import CaseRun, case_scenario, run_case, select_cases
from rlsim.validation.table import FigureRow

Overrides = dict[str, object]


@dataclass(frozen=True)
class Assumption:
    name: str
    change: str  # what is changed, as a reader says it
    overrides: Callable[[Scenario], Overrides | None]  # None: the assumption does not apply to this scenario


def _longer_responses(scenario: Scenario) -> Overrides | None:
    model = scenario.workload.response_tokens
    scale = getattr(model, "scale", None)
    return None if scale is None else {"workload.response_tokens.scale": scale * 1.25}


def _costlier_reward(scenario: Scenario) -> Overrides | None:
    reward = scenario.workload.reward
    # The whole section, so a reward the file leaves to its default keeps its kind.
    if reward.kind == "rule":
        return {"workload.reward": {**reward.model_dump(), "cpu_seconds_per_sample": reward.cpu_seconds_per_sample * 2}}
    if reward.kind == "sandbox":
        return {"workload.reward": {**reward.model_dump(), "median_latency_s": reward.median_latency_s * 2}}
    return None


def _slower_engine_steps(scenario: Scenario) -> Overrides:
    framework = scenario.framework
    return {"framework.engine_step_cpu_s": framework.engine_step_cpu_s * 2,
            "framework.engine_step_cpu_per_sequence_s": framework.engine_step_cpu_per_sequence_s * 2}


def _slower_host(scenario: Scenario) -> Overrides:
    framework = scenario.framework
    return {f"framework.{name}": getattr(framework, name) * 1.5 for name in HOST_CPU_TIMES}


ASSUMPTIONS = (
    Assumption("lengths", "response lengths ×1.25", _longer_responses),
    Assumption("reward", "reward cost per sample ×2", _costlier_reward),
    Assumption("engine_step", "engine step CPU time ×2", _slower_engine_steps),
    Assumption("host", "every host CPU time ×1.5", _slower_host),
)


@dataclass(frozen=True)
class SensitivityRow:
    case: str
    figure: str
    inputs: str
    published: float | None
    simulated: float
    # assumption name -> % change of the simulated figure; None: the assumption does not apply to the case, or
    # the figure is zero without it
    moves_pct: dict[str, float | None]

    @property
    def error_pct(self) -> float | None:
        return None if self.published is None else 100.0 * (self.simulated - self.published) / self.published


@dataclass(frozen=True)
class Sensitivity:
    rows: tuple[SensitivityRow, ...]

    def median_move_pct(self, assumption: str) -> float | None:
        """Median |change| an assumption makes over the figures it applies to."""
        moves = [abs(m) for r in self.rows if (m := r.moves_pct.get(assumption)) is not None]
        return statistics.median(moves) if moves else None

    def as_dict(self) -> dict:
        return {"assumptions": {a.name: a.change for a in ASSUMPTIONS},
                "rows": [{**asdict(r), "error_pct": r.error_pct} for r in self.rows],
                "median_abs_move_pct": {a.name: self.median_move_pct(a.name) for a in ASSUMPTIONS}}

    def text(self) -> str:
        def cell(value: float | None) -> str:
            return "–" if value is None else f"{value:+.1f}%"

        cells = [(r.case, r.figure, r.inputs, cell(r.error_pct), *(cell(r.moves_pct[a.name]) for a in ASSUMPTIONS))
                 for r in self.rows]
        table = text_table(("case", "figure", "inputs", "error", *(a.change for a in ASSUMPTIONS)), cells,
                           left=(0, 1, 2))
        medians = ", ".join(f"{a.change} {'–' if m is None else f'{m:.1f}%'}"
                            for a in ASSUMPTIONS for m in [self.median_move_pct(a.name)])
        return f"{table}\n\nmedian |move| of a figure: {medians}"


def _run(job: tuple[str, Case, Overrides]) -> CaseRun:
    manifest_path, case, overrides = job
    return run_case(manifest_path, case, probe=overrides)


@dataclass(frozen=True)
class SensitivityPlan:
    """The runs `run_sensitivity` makes: each selected case as published (assumption None), then once per assumption
    that applies to it, with that assumption's overrides."""

    manifest_path: str
    cases: list[Case]
    runs: list[tuple[Case, str | None, Overrides]]


def plan_sensitivity(manifest_path: str | Path, names: list[str] | None = None) -> SensitivityPlan:
    manifest_path = str(manifest_path)
    cases = select_cases(load_manifest(manifest_path), names)
    runs: list[tuple[Case, str | None, Overrides]] = []
    for case in cases:
        scenario = case_scenario(manifest_path, case)
        runs.append((case, None, {}))
        for assumption in ASSUMPTIONS:
            overrides = assumption.overrides(scenario)
            if overrides is not None:
                runs.append((case, assumption.name, overrides))
    return SensitivityPlan(manifest_path, cases, runs)


def run_sensitivity(plan: SensitivityPlan, jobs: int = 1, on_run: Callable[[], None] | None = None) -> Sensitivity:
    """Make the plan's runs (in `jobs` processes; results do not depend on it) and report each figure's move under
    each assumption."""
    work = [(plan.manifest_path, case, overrides) for case, _, overrides in plan.runs]
    results: list[CaseRun] = []
    parallel = jobs > 1 and len(work) > 1
    with ProcessPoolExecutor(max_workers=jobs) if parallel else nullcontext() as pool:
        for run in (pool.map if pool is not None else map)(_run, work):
            results.append(run)
            if on_run is not None:
                on_run()
    return Sensitivity(_rows(plan, results))


def _rows(plan: SensitivityPlan, results: list[CaseRun]) -> tuple[SensitivityRow, ...]:
    by_case: dict[str, dict[str | None, tuple[FigureRow, ...]]] = {}
    for (case, assumption, _), run in zip(plan.runs, results, strict=True):
        by_case.setdefault(case.name, {})[assumption] = run.rows
    rows = []
    for case in plan.cases:
        runs = by_case[case.name]
        for i, base in enumerate(runs[None]):
            moves = {a.name: _move(base, runs[a.name][i]) if a.name in runs else None for a in ASSUMPTIONS}
            rows.append(SensitivityRow(case.name, base.figure, base.inputs, base.published, base.simulated, moves))
    return tuple(rows)


def _move(base: FigureRow, changed: FigureRow) -> float | None:
    if base.simulated == 0:  # a stage the case does not run: a change of a zero has no percentage
        return 0.0 if changed.simulated == 0 else None
    return 100.0 * (changed.simulated - base.simulated) / base.simulated

