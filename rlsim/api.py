"""The Python API for notebooks and scripts: load a scenario, change it, simulate it, look at the result, compare.

    import rlsim
    base = rlsim.load_scenario("scenarios/quickstart.yaml")
    wider = rlsim.with_(base, **{"placement.rollout.gpus": 16, "cluster.pools[0].nodes": 2})
    result = rlsim.simulate(base)
    result.metrics["step_time_s"]; result.steps; result.figure("timeline")
    rlsim.compare(result, rlsim.simulate(wider))

Nothing here holds state between calls: a loaded scenario carries the YAML it came from, so that `with_` can
re-validate a change the way `rlsim run --set` does (see `with_`).
"""
from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TextIO

import yaml
from rich.console import Console

from rlsim.config.bound import bind
from rlsim.config.loader import scenario_from_document
from rlsim.config.schema import Scenario
from rlsim.events import EventLog
from rlsim.metrics import RunFacts, engine_rows, gpu_rows, run_metrics, step_rows
from rlsim.progress import Progress
from rlsim.report.compare import (
    COMPARE_FIGURES,
    NamedMetrics,
    compare_html,
    compare_text,
    differences,
    differences_table,
    read_run_metrics,
)
from rlsim.report.event_files import EVENT_CHOICES
from rlsim.report.figures import FIGURES, RunData
from rlsim.report.html import card, result_card_html, run_report_html
from rlsim.report.run_folder import write_run_folder
from rlsim.report.text import headline_text
from rlsim.sim.run import simulate_log
from rlsim.yamlsource import YamlDocument, parse_yaml, read_yaml

__all__ = ["Comparison", "MeasuredWindowWarning", "Result", "compare", "load_scenario", "simulate", "with_"]


@dataclasses.dataclass(frozen=True, eq=False)
class _Origin:
    document: YamlDocument  # the YAML as written, with the overrides applied so far
    base_dir: Path  # where relative paths in it resolve
    scenario: Scenario  # what it resolved to: a copy changed since (model_copy) did not come from this YAML


def _remember(document: YamlDocument, base_dir: Path) -> Scenario:
    """The scenario `document` describes, carrying it (Scenario._source) for `with_`."""
    scenario = scenario_from_document(document, base_dir=base_dir)
    scenario._source = _Origin(document, base_dir, scenario)
    return scenario


def _origin(scenario: Scenario) -> _Origin | None:
    origin = scenario._source
    return origin if isinstance(origin, _Origin) and origin.scenario == scenario else None


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Read, validate and resolve a scenario file, with optional dotted-path overrides (as `rlsim run --set`).
    Bad input raises ScenarioError naming the file, line and field."""
    document = read_yaml(path)
    if overrides:
        document = document.with_overrides(dict(overrides))
    return _remember(document, Path(path).resolve().parent)


def with_(scenario: Scenario, overrides: Mapping[str, Any] | None = None, /, **more: Any) -> Scenario:
    """A copy of `scenario` with dotted-path fields changed, validated and resolved again:
    `with_(s, **{"placement.rollout.gpus": 48})` or `with_(s, {"cluster.pools[0].nodes": 2})`.

    The change is applied to the YAML the scenario was loaded from, not to its resolved values, so defaults derived
    from a changed field follow it (a colocated placement's training GPUs follow `placement.rollout.gpus`; a new
    `model` brings its own architecture). A scenario made some other way is taken as written in full.
    """
    changes = {**(overrides or {}), **more}
    origin = _origin(scenario)
    if origin is None:
        text = yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)
        return _remember(parse_yaml(text, f"<scenario {scenario.name}>").with_overrides(changes), Path.cwd())
    return _remember(origin.document.with_overrides(changes), origin.base_dir)


def _table(rows: list[dict]):
    """A pandas DataFrame when pandas is installed, else the rows themselves (a list of dicts)."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame.from_records(rows)


@dataclasses.dataclass(frozen=True)
class Result:
    """One simulated run: its scenario, event log and metrics (the content of metrics.json), with tables and figures."""

    scenario: Scenario
    log: EventLog
    facts: RunFacts
    metrics: dict
    host_seconds: float  # how long the simulation took on this machine (not part of the metrics)

    @property
    def steps(self):
        """Per RL step: time, seconds per verl stage, samples, tokens, tokens/s and the long-tail bubble."""
        return _table(step_rows(self.log))

    @property
    def gpus(self):
        """Per GPU: pool, GPU type, the engines and training ranks it served, seconds by label, busy fraction."""
        return _table(gpu_rows(self.log, self.facts))

    @property
    def engines(self):
        """Per rollout engine: KV-cache occupancy, sequences running and waiting (time-weighted while it generated, and
        maxima), mean decode batch and iteration counts, from the engine samples."""
        return _table(engine_rows(self.log, self.facts))

    @property
    def pools(self):
        """Per pool: GPU-seconds by label and the busy / communication / memory / idle fractions."""
        return _table([{"pool": name, "gpu": pool["gpu"], "gpus": pool["gpus"], **pool["gpu_seconds_by_label"],
                        **{f"{k}_fraction": v for k, v in pool["utilisation"].items()}}
                       for name, pool in self.metrics["pools"].items()])

    @property
    def sequences(self):
        """Every rollout: engine, lengths, when it was submitted and finished, policy versions, staleness."""
        return _table([{**dataclasses.asdict(r), "staleness": r.staleness} for r in self.log.sequences])

    @property
    def figure_names(self) -> tuple[str, ...]:
        return tuple(FIGURES)

    def figure(self, name: str):
        """A plotly figure of the report: one of `figure_names` (timeline, gpu_time, steps, lengths, engines,
        staleness)."""
        if name not in FIGURES:
            raise KeyError(f"no figure named {name!r}; figures: {', '.join(FIGURES)}")
        return FIGURES[name](self._data())

    def summary(self) -> str:
        """The headline figures as text, as `rlsim run` prints them."""
        return headline_text(self.metrics)

    def report_html(self) -> str:
        """The self-contained HTML report `rlsim run` writes."""
        return run_report_html(self._data(), self.scenario)

    def save(self, folder: str | Path, events: str = "auto") -> list[Path]:
        """Write the run folder `rlsim run` writes (metrics.json, events, trace.json, report.html, …); `events` as
        `rlsim run --events`: "full", "steps", "none", or "auto" (full unless the run recorded over a million spans)."""
        if events not in EVENT_CHOICES:
            raise ValueError(f"events={events!r}: valid are {', '.join(EVENT_CHOICES)}")
        return write_run_folder(Path(folder), self.scenario, self._data(), self.host_seconds, events)

    def _repr_html_(self) -> str:
        return result_card_html(self._data(), self.scenario)

    def __repr__(self) -> str:
        m = self.metrics
        return (f"<Result {self.scenario.name}: {m['measured']['window']}, mean step {m['step_time_s']['mean']:.2f} s,"
                f" {m['throughput']['tokens_per_s']:,.0f} tokens/s, busy {m['utilisation']['busy']:.1%}>")

    def _data(self) -> RunData:
        return RunData(self.log, self.facts, self.metrics)


class MeasuredWindowWarning(UserWarning):
    """The steps a result averages include the pipeline's fill: its step time is not the steady state's."""


def simulate(scenario: Scenario, *, mode: Literal["fast", "exact"] = "fast", progress: bool | None = None) -> Result:
    """Simulate the scenario's RL loop and compute its metrics (what `rlsim run` does, without writing files).

    Unless the scenario sets run.steps / run.warmup_steps, the result is measured after the schedule's pipeline has
    filled (`result.metrics["measured"]` says over which steps); a warm-up set shorter than the fill warns
    (MeasuredWindowWarning). `progress`: a bar over the steps (default: in Jupyter only)."""
    bound = bind(scenario)
    with Progress(scenario.run.steps, "steps", _progress_stream(progress)) as bar:
        output = simulate_log(bound, mode=mode, on_step=lambda step: bar.advance())
    facts = RunFacts.from_bound(bound)
    result = Result(scenario, output.log, facts, run_metrics(output.log, facts), output.simulator_wall_s)
    warning = result.metrics["measured"]["warning"]
    if warning:
        warnings.warn(warning, MeasuredWindowWarning, stacklevel=2)
    return result


def _progress_stream(progress: bool | None) -> TextIO | None:
    if progress is None:
        progress = Console().is_jupyter
    return sys.stderr if progress else None


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Runs side by side against the first: text, a table, figures and HTML, differences that matter first."""

    names: tuple[str, ...]
    metrics: tuple[dict, ...]

    def _runs(self) -> list[NamedMetrics]:
        return [NamedMetrics(n, m) for n, m in zip(self.names, self.metrics, strict=True)]

    @property
    def table(self):
        """One row per headline figure, largest change first: each run's value and its change against the first."""
        rows = []
        for diff in differences(self._runs()):
            row: dict[str, Any] = {"figure": diff.headline.title}
            row.update(dict(zip(self.names, diff.values, strict=True)))
            row.update({f"change {n}": diff.change[i] for i, n in enumerate(self.names) if i})
            rows.append(row)
        return _table(rows)

    def text(self) -> str:
        return compare_text(self._runs())

    def html(self) -> str:
        """The self-contained page `rlsim compare` writes."""
        return compare_html(self._runs())

    def figure(self, name: str):
        """"shares" (GPU-time by label per run) or "stages" (mean seconds per verl stage per run)."""
        if name not in COMPARE_FIGURES:
            raise KeyError(f"no figure named {name!r}; figures: {', '.join(COMPARE_FIGURES)}")
        return COMPARE_FIGURES[name](self._runs())

    def _repr_html_(self) -> str:
        return card(differences_table(self._runs()))


def compare(*runs: Result | str | Path, names: list[str] | None = None) -> Comparison:
    """Compare results (or run folders written by `rlsim run`); the first is the baseline. Names default to the
    scenario names (folder names for folders), numbered when they repeat."""
    if len(runs) < 2:
        raise ValueError("compare needs at least two runs")
    metrics, default_names = [], []
    for run in runs:
        if isinstance(run, Result):
            metrics.append(run.metrics)
            default_names.append(run.scenario.name)
        else:
            metrics.append(read_run_metrics(Path(run)))
            default_names.append(Path(run).name)
    if names is None:
        names = [f"{n} #{i + 1}" if default_names.count(n) > 1 else n for i, n in enumerate(default_names)]
    if len(names) != len(runs):
        raise ValueError(f"{len(names)} names for {len(runs)} runs")
    return Comparison(tuple(names), tuple(metrics))
