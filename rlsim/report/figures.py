"""The report's plotly figures, each a function of one run's event log, facts and metrics.

Big clusters are drawn downsampled so that a report stays small and quick to open: the timeline shows at most
MAX_TIMELINE_ROWS GPU groups, chosen across the spread of busy time within each role, and a row with more than
MAX_SPANS_PER_ROW spans is drawn as TIMELINE_BINS equal time bins, each coloured by the label that filled most of it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlsim.events import BUSY_LABELS, LABELS, RUN_END, STAGES, EventLog, Span
from rlsim.metrics.efficiency import TRAINING_UNITS
from rlsim.metrics.engines import engine_series
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.groups import GpuGroup, gpu_groups, group_spans
from rlsim.metrics.sequences import trained
from rlsim.metrics.steps import step_rows
from rlsim.report.colors import LABEL_COLORS

MAX_TIMELINE_ROWS = 48
MAX_SPANS_PER_ROW = 400
TIMELINE_BINS = 400
MAX_ENGINE_LINES = 16  # more engines than this are drawn as a band (min, median, max) instead of a line each
STAGE_COLORS = dict(zip(STAGES, ("#3182bd", "#17becf", "#74c476", "#a1d99b", "#fdae6b", "#8c6d31", "#006d2c",
                                 "#e6550d", "#9467bd", "#bdbdbd"), strict=True))
# The legend sits at the bottom of the figure, below the x-axis title, whatever the figure's height.
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=100),
              legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom"))


@dataclass(frozen=True)
class RunData:
    """What every figure draws from."""

    log: EventLog
    facts: RunFacts
    metrics: dict


# ----------------------------------------------------------------------------------------------------- timeline


def _role(group: GpuGroup) -> str:
    if any(u.startswith(TRAINING_UNITS) for u in group.units):
        return "training"
    if any(u.startswith(("judge", "rm")) for u in group.units):
        return "reward"
    return "rollout" if group.units else "idle"


def select_rows(groups: list[GpuGroup], spans: Sequence[list[Span]], limit: int) -> list[int]:
    """Indices of at most `limit` groups to draw, in GPU order. Each role keeps a share of the rows in proportion to
    its groups (at least a few), picked evenly across its groups ranked by busy seconds, so the least and most busy
    and the median are always drawn."""
    if len(groups) <= limit:
        return list(range(len(groups)))
    by_role: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        by_role.setdefault(_role(group), []).append(i)
    # Each role first gets a few rows (or all of its groups), then the rest of the budget in proportion to its size.
    floors = {role: min(len(members), max(1, limit // (4 * len(by_role)))) for role, members in by_role.items()}
    spare = max(0, limit - sum(floors.values()))
    chosen: list[int] = []
    for role, members in by_role.items():
        share = min(len(members), floors[role] + spare * len(members) // len(groups))
        busy = [sum(s.seconds for s in spans[i] if s.label in BUSY_LABELS) for i in members]
        ranked = [members[k] for k in np.argsort(busy, kind="stable")]
        picks = np.unique(np.linspace(0, len(ranked) - 1, share).round().astype(int))
        chosen += [ranked[k] for k in picks]
    return sorted(chosen)


def binned_segments(spans: list[Span], wall_s: float, bins: int) -> list[tuple[float, float, str]]:
    """(start, end, label) runs of equal time bins, each bin labelled by the label covering most of it."""
    edges = np.linspace(0.0, wall_s, bins + 1)
    labels = sorted({s.label for s in spans})
    filled = np.zeros((len(labels), bins))
    for row, label in enumerate(labels):
        starts = np.sort([s.start for s in spans if s.label == label])
        ends = np.sort([s.end for s in spans if s.label == label])
        # Seconds of `label` in [0, t]: Σ over started spans of (t − start) minus Σ over ended spans of (t − end).
        k = np.searchsorted(starts, edges, side="right")
        m = np.searchsorted(ends, edges, side="right")
        started = np.concatenate([[0.0], np.cumsum(starts)])[k]
        ended = np.concatenate([[0.0], np.cumsum(ends)])[m]
        filled[row] = np.diff(edges * k - started - (edges * m - ended))
    dominant = filled.argmax(axis=0)
    segments: list[tuple[float, float, str]] = []
    run_start = 0
    for b in range(1, bins + 1):
        if b == bins or dominant[b] != dominant[run_start]:
            segments.append((float(edges[run_start]), float(edges[b]), labels[dominant[run_start]]))
            run_start = b
    return segments


def timeline_figure(data: RunData) -> go.Figure:
    log = data.log
    groups = gpu_groups(log, data.facts)
    spans = group_spans(log, groups)
    rows = select_rows(groups, spans, MAX_TIMELINE_ROWS)
    bars: dict[str, dict[str, list]] = {label: {"base": [], "x": [], "y": [], "customdata": []} for label in LABELS}
    binned_rows = 0
    for i in rows:
        name = groups[i].name
        row = spans[i]
        if len(row) > MAX_SPANS_PER_ROW:
            binned_rows += 1
            segments = [(a, b, label, "binned: the label covering most of each bin", -1)
                        for a, b, label in binned_segments(row, log.wall_s, TIMELINE_BINS)]
        else:
            segments = [(s.start, s.end, s.label, s.stage or "-", s.step) for s in row]
        for start, end, label, stage, step in segments:
            bar = bars[label]
            bar["base"].append(start)
            bar["x"].append(end - start)
            bar["y"].append(name)
            bar["customdata"].append((stage, step, end))
    fig = go.Figure()
    for label, bar in bars.items():
        if bar["x"]:
            fig.add_trace(go.Bar(
                orientation="h", name=label, base=bar["base"], x=bar["x"], y=bar["y"], customdata=bar["customdata"],
                marker=dict(color=LABEL_COLORS[label], line=dict(width=0)),
                hovertemplate="%{y}<br><b>" + label + "</b> %{base:.3f}–%{customdata[2]:.3f} s (%{x:.3f} s)"
                              "<br>stage %{customdata[0]}, step %{customdata[1]}<extra></extra>"))
    shown = f"{len(rows)} of {len(groups)} GPU groups" if len(rows) < len(groups) else f"{len(groups)} GPU groups"
    note = f"; {binned_rows} rows binned into {TIMELINE_BINS} time bins" if binned_rows else ""
    order = [groups[i].name for i in rows]
    fig.update_layout(**LAYOUT, barmode="overlay", bargap=0.15,
                      title=f"Timeline: {shown}{note}",
                      height=max(300, 120 + 18 * len(rows)),
                      xaxis=dict(title="simulated time (s)", range=[0, log.wall_s]),
                      yaxis=dict(categoryorder="array", categoryarray=order[::-1], automargin=True))
    return fig


# ----------------------------------------------------------------------------------------------------- GPU time


def gpu_time_figure(data: RunData) -> go.Figure:
    """Stacked GPU-hours by label for each pool (the numbers are metrics.json's `pools`)."""
    pools = data.metrics["pools"]
    names = list(pools)
    fig = go.Figure()
    for label in LABELS:
        seconds = [pools[p]["gpu_seconds_by_label"][label] for p in names]
        if any(seconds):
            totals = [sum(pools[p]["gpu_seconds_by_label"].values()) or 1.0 for p in names]
            fig.add_trace(go.Bar(
                name=label, x=[f"{p} ({pools[p]['gpus']} × {pools[p]['gpu']})" for p in names], y=seconds,
                marker_color=LABEL_COLORS[label], customdata=[s / t for s, t in zip(seconds, totals, strict=True)],
                hovertemplate="<b>" + label + "</b> %{y:,.1f} GPU-s (%{customdata:.1%})<extra></extra>"))
    fig.update_layout(**LAYOUT, barmode="stack", title="GPU-seconds by label, per pool", yaxis_title="GPU-seconds",
                      height=420)
    return fig


# ----------------------------------------------------------------------------------------------------- steps


def step_figure(data: RunData) -> go.Figure:
    rows = step_rows(data.log)
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    for stage in STAGES:
        seconds = [r[stage] for r in rows]
        if any(seconds):
            fig.add_trace(go.Bar(name=stage, x=steps, y=seconds, marker_color=STAGE_COLORS[stage],
                                 hovertemplate="step %{x}: <b>" + stage + "</b> %{y:.2f} s<extra></extra>"))
    fig.add_trace(go.Scatter(name="step time", x=steps, y=[r["step_time_s"] for r in rows], mode="markers+lines",
                             line=dict(color="black", width=1), hovertemplate="step %{x}: %{y:.2f} s<extra></extra>"))
    warmup = data.facts.warmup_steps
    if warmup:
        fig.add_vrect(x0=-0.5, x1=warmup - 0.5, fillcolor="#eeeeee", line_width=0, layer="below",
                      annotation_text="warm-up", annotation_position="top left")
    fig.update_layout(**LAYOUT, barmode="stack", title="Step time by verl stage (stages of off-policy schedules overlap)",
                      xaxis=dict(title="RL step", dtick=1), yaxis_title="seconds", height=420)
    return fig


# ----------------------------------------------------------------------------------------------------- lengths


def length_figure(data: RunData) -> go.Figure:
    records = data.log.sequences
    kept = trained(data.log).response_tokens.astype(np.float64)
    # In flight at the run's end is the horizon, not a policy's drop: such sequences are not drawn.
    thrown = ~records.trained & records.dropped_by_mask(lambda name: name != RUN_END)
    dropped = records.response_tokens[thrown].astype(np.float64)
    everything = np.concatenate([kept, dropped])
    edges = np.histogram_bin_edges(everything, bins=60) if everything.size else np.array([0.0, 1.0])
    centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
    fig = go.Figure()
    for name, values, color in (("trained", kept, "#3182bd"), ("dropped (tokens generated)", dropped, "#d62728")):
        if values.size:
            counts, _ = np.histogram(values, bins=edges)
            fig.add_trace(go.Bar(name=name, x=centres, y=counts, width=width, marker_color=color,
                                 hovertemplate="%{x:.0f} tokens: %{y} sequences<extra>" + name + "</extra>"))
    fig.update_layout(**LAYOUT, barmode="stack", title="Response length distribution", height=380,
                      xaxis_title="response tokens", yaxis_title="sequences")
    return fig


# ----------------------------------------------------------------------------------------------------- engines


def engine_load_figure(data: RunData) -> go.Figure:
    """KV-cache occupancy, sequences running and sequences waiting per rollout engine, each averaged over equal time
    bins from the engines' samples; more than MAX_ENGINE_LINES engines are drawn as a band (min, median, max)."""
    series = engine_series(data.log, data.facts)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("KV-cache occupancy (of each engine's cache)",
                                        "Sequences running (holding a slot)", "Sequences waiting for admission"))
    engines = len(series.engines)
    rows = ((1, series.kv_fraction, ".1%"), (2, series.running, ".1f"), (3, series.waiting, ".1f"))
    for row, values, fmt in rows:
        if not engines:
            continue
        if engines <= MAX_ENGINE_LINES:
            for e, name in enumerate(series.engines):
                fig.add_trace(go.Scatter(x=series.times, y=values[e], mode="lines", name=name, legendgroup=name,
                                         showlegend=row == 1, line=dict(width=1),
                                         hovertemplate=f"{name} %{{y:{fmt}}} at %{{x:.1f}} s<extra></extra>"),
                              row=row, col=1)
        else:
            low, mid, high = values.min(axis=0), np.median(values, axis=0), values.max(axis=0)
            fig.add_trace(go.Scatter(x=series.times, y=high, mode="lines", line=dict(width=0, color="#3182bd"),
                                     name="max over engines", showlegend=row == 1, legendgroup="max",
                                     hovertemplate=f"max %{{y:{fmt}}}<extra></extra>"), row=row, col=1)
            fig.add_trace(go.Scatter(x=series.times, y=low, mode="lines", line=dict(width=0, color="#3182bd"),
                                     fill="tonexty", fillcolor="rgba(49,130,189,0.25)", name="min over engines",
                                     showlegend=row == 1, legendgroup="min",
                                     hovertemplate=f"min %{{y:{fmt}}}<extra></extra>"), row=row, col=1)
            fig.add_trace(go.Scatter(x=series.times, y=mid, mode="lines", line=dict(width=2, color="#08519c"),
                                     name=f"median of {engines} engines", showlegend=row == 1, legendgroup="median",
                                     hovertemplate=f"median %{{y:{fmt}}} at %{{x:.1f}} s<extra></extra>"),
                          row=row, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=1, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    fig.update_layout(**LAYOUT, title="Rollout engines over time (means over time bins)", height=720)
    return fig


# ----------------------------------------------------------------------------------------------------- staleness


def staleness_figure(data: RunData) -> go.Figure:
    histogram = data.metrics["staleness"]["histogram"]
    fig = go.Figure(go.Bar(x=[int(k) for k in histogram], y=list(histogram.values()), marker_color="#e377c2",
                           hovertemplate="staleness %{x}: %{y} sequences<extra></extra>"))
    fig.update_layout(**LAYOUT, title="Staleness of trained sequences (policy versions behind)", height=340,
                      xaxis=dict(title="versions between generation and training", dtick=1),
                      yaxis_title="sequences")
    return fig


FIGURES: dict[str, Callable[[RunData], go.Figure]] = {
    "timeline": timeline_figure,
    "gpu_time": gpu_time_figure,
    "steps": step_figure,
    "lengths": length_figure,
    "engines": engine_load_figure,
    "staleness": staleness_figure,
}
