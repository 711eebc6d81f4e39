"""Side-by-side comparison of runs from their metrics alone, differences that matter first: headline figures
ordered by how far they move from the first run (the baseline), then where the GPU-time moved, then the stages."""
from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from rlsim.errors import Problem, ScenarioError
from rlsim.events import LABELS, STAGES
from rlsim.metrics.labels import label_shares
from rlsim.report.colors import LABEL_COLORS
from rlsim.report.figures import LAYOUT, STAGE_COLORS
from rlsim.report.headline import Headline, format_value, lookup, shown
from rlsim.report.html import figure_div, page
from rlsim.report.terminal import text_table


@dataclass(frozen=True)
class NamedMetrics:
    name: str
    metrics: dict


def read_run_metrics(folder: Path) -> dict:
    """The metrics.json of a run folder written by `rlsim run`."""
    path = folder / "metrics.json"
    if not path.is_file():
        raise ScenarioError(Problem("not a run folder: it has no metrics.json", file=str(folder),
                                    valid="a folder written by `rlsim run`"))
    try:
        metrics = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ScenarioError(Problem(f"metrics.json is not JSON: {err.msg}", file=str(path), line=err.lineno)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(Problem(f"metrics.json cannot be read: {err}", file=str(path))) from None
    # A metrics.json from another tool, or an older rlsim, lacks what the comparison reads: say so, not KeyError.
    needed = {"gpu_seconds_by_label": dict, "stages_s": dict}
    if not isinstance(metrics, dict):
        raise ScenarioError(Problem("metrics.json is not an rlsim run's metrics (not a JSON object)", file=str(path),
                                    valid="a folder written by `rlsim run`"))
    for key, kind in needed.items():
        if not isinstance(metrics.get(key), kind) or (key == "stages_s" and not set(STAGES) <= set(metrics[key])):
            raise ScenarioError(Problem(f"metrics.json is not an rlsim run's metrics: {key!r} is missing or "
                                        "incomplete", path=key, file=str(path), valid="a folder written by `rlsim run`"))
    return metrics


@dataclass(frozen=True)
class Difference:
    """A headline figure across runs. `change` is against the first run: a difference in share points for fractions
    (idle 3% → 60% is +0.57, not +1,900%), a relative change for everything else; None where undefined."""

    headline: Headline
    values: tuple[float | None, ...]
    change: tuple[float | None, ...]

    @property
    def largest(self) -> float:
        return max((abs(c) for c in self.change if c is not None), default=0.0)

    def verdict(self, run: int) -> str:
        """'better', 'worse' or '' for run `run` against the baseline."""
        change = self.change[run]
        if change is None or abs(change) < 1e-9 or self.headline.better == "neither":
            return ""
        return "better" if (change > 0) == (self.headline.better == "higher") else "worse"

    def change_text(self, run: int) -> str:
        change = self.change[run]
        if change is None:
            return ""
        return f"{change * 100:+.1f} pts" if self.headline.unit == "fraction" else f"{change:+.1%}"


def _change(value: float | None, base: float | None, unit: str) -> float | None:
    if value is None or base is None:
        return None
    if unit == "fraction":
        return value - base
    if base == 0:
        return 0.0 if value == 0 else None
    return (value - base) / abs(base)


def differences(runs: list[NamedMetrics]) -> list[Difference]:
    """Every headline figure with each run's value and change against the first run, largest change first (ties keep
    the headline order)."""
    rows = []
    for headline in shown(*(run.metrics for run in runs)):
        values = tuple(lookup(run.metrics, headline.path) for run in runs)
        rows.append(Difference(headline, values, tuple(_change(v, values[0], headline.unit) for v in values)))
    return sorted(rows, key=lambda d: -d.largest)


def moved_labels(runs: list[NamedMetrics]) -> list[tuple[str, list[float]]]:
    """Labels whose share of GPU-time differs between runs, largest move (in share points) first."""
    shares = [label_shares(run.metrics) for run in runs]
    rows = [(label, [s[label] for s in shares]) for label in LABELS]
    rows = [(label, values) for label, values in rows if max(values) > 0]
    return sorted(rows, key=lambda row: -(max(row[1]) - min(row[1])))


def compare_text(runs: list[NamedMetrics]) -> str:
    """The headline figures side by side, largest change first, then the GPU-time shares and stage means that moved."""
    names = [run.name for run in runs]
    headline = [(diff.headline.title, *(format_value(v, diff.headline.unit) for v in diff.values),
                 ", ".join(f"{diff.change_text(i)} {diff.verdict(i)}".strip() for i in range(1, len(runs))))
                for diff in differences(runs)]
    shares = [(label, *(f"{v:.1%}" for v in values)) for label, values in moved_labels(runs)]
    stages = [(stage, *(f"{run.metrics['stages_s'][stage]:.2f}" for run in runs)) for stage in STAGES
              if any(run.metrics["stages_s"][stage] for run in runs)]
    windows = [run.metrics["measured"]["window"] for run in runs if "measured" in run.metrics]
    measured = ["measured over: " + "; ".join(f"{run.name} {window}" for run, window in zip(runs, windows, strict=True))
                if len(windows) == len(runs) else ""]
    return "\n".join([*measured,
                      text_table(("", *names, f"change vs {names[0]}"), headline, left=(0, len(names) + 1)), "",
                      text_table(("share of GPU-time", *names), shares), "",
                      text_table(("stage mean (s)", *names), stages)]).lstrip("\n")


def differences_table(runs: list[NamedMetrics]) -> str:
    head = "<tr><th>figure</th>" + "".join(f"<th>{html.escape(r.name)}</th>" for r in runs) + "</tr>"
    rows = []
    for diff in differences(runs):
        cells = [f"<td>{html.escape(diff.headline.title)}</td>"]
        for i, value in enumerate(diff.values):
            change = f" ({diff.change_text(i)})" if i and diff.change[i] is not None else ""
            verdict = diff.verdict(i) if i else ""
            cells.append(f'<td class="{verdict}" data-key="{html.escape(diff.headline.key)}" '
                         f'data-run="{i}">{format_value(value, diff.headline.unit)}{change}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="differences">{head}{"".join(rows)}</table>'


def share_figure(runs: list[NamedMetrics]) -> go.Figure:
    fig = go.Figure()
    names = [run.name for run in runs]
    for label, values in moved_labels(runs):
        fig.add_trace(go.Bar(name=label, x=names, y=values, marker_color=LABEL_COLORS[label],
                             hovertemplate="%{x}: <b>" + label + "</b> %{y:.1%}<extra></extra>"))
    fig.update_layout(**LAYOUT, barmode="stack", title="Share of GPU-time by label", yaxis_tickformat=".0%",
                      height=440)
    return fig


def stage_figure(runs: list[NamedMetrics]) -> go.Figure:
    fig = go.Figure()
    names = [run.name for run in runs]
    for stage in STAGES:
        values = [run.metrics["stages_s"][stage] for run in runs]
        if any(values):
            fig.add_trace(go.Bar(name=stage, x=names, y=values, marker_color=STAGE_COLORS[stage],
                                 hovertemplate="%{x}: <b>" + stage + "</b> %{y:.2f} s<extra></extra>"))
    fig.add_trace(go.Scatter(name="mean step time", x=names, y=[run.metrics["step_time_s"]["mean"] for run in runs],
                             mode="markers", marker=dict(color="black", symbol="line-ew-open", size=40)))
    fig.update_layout(**LAYOUT, barmode="stack", title="Mean seconds per verl stage", yaxis_title="seconds",
                      height=440)
    return fig


def compare_html(runs: list[NamedMetrics]) -> str:
    names = " vs ".join(run.name for run in runs)
    body = [f"<h1>{html.escape(names)}</h1>",
            f'<p class="context">Changes are against {html.escape(runs[0].name)}; the figures that moved most come '
            "first.</p>",
            '<section id="summary"><h2>Differences</h2>', differences_table(runs), "</section>",
            '<section id="gpu-time"><h2>Where the GPU-time went</h2>', figure_div(share_figure(runs), "fig-shares"),
            "</section>",
            '<section id="stages"><h2>Step time by verl stage</h2>', figure_div(stage_figure(runs), "fig-stages"),
            "</section>"]
    return page(f"rlsim compare: {names}", body)


COMPARE_FIGURES: dict[str, Callable[[list[NamedMetrics]], go.Figure]] = {"shares": share_figure, "stages": stage_figure}
