"""The sweep report: one self-contained HTML page with the best points, the Pareto front of step time, GPUs and cost,
the effect of each axis on step time, and the whole results table. Figures are plotly, as in a run's report."""
from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from rlsim.report.html import figure_div, page

if TYPE_CHECKING:  # the report draws what the sweep hands it, and never calls back into it
    from rlsim.sweep.runner import SweepRun

OK_COLOR, FRONT_COLOR = "#9aa5b1", "#d1495b"


def best(rows: Sequence[dict], column: str, *, lowest: bool = True, count: int = 5) -> list[dict]:
    """The `count` finished points with the best value of `column`."""
    ranked = [r for r in rows if r["status"] == "ok" and r.get(column) is not None]
    return sorted(ranked, key=_key(column, lowest))[:count]


def _key(column: str, lowest: bool) -> Callable[[dict], tuple]:
    return lambda row: (row[column] if lowest else -row[column], row["point"])


def pareto_front(rows: Sequence[dict], objectives: Sequence[str]) -> list[dict]:
    """Finished points that no other point beats on every objective (all minimised) while being better on one."""
    candidates = [r for r in rows if r["status"] == "ok" and all(r.get(o) is not None for o in objectives)]

    def dominates(a: dict, b: dict) -> bool:
        return all(a[o] <= b[o] for o in objectives) and any(a[o] < b[o] for o in objectives)

    return [r for r in candidates if not any(dominates(other, r) for other in candidates)]


def cost_column(rows: Sequence[dict]) -> str:
    """Dollars per 1,000 steps when every finished point is priced, else GPU-hours per 1,000 steps."""
    finished = [r for r in rows if r["status"] == "ok"]
    priced = finished and all(r.get("usd_per_1000_steps") is not None for r in finished)
    return "usd_per_1000_steps" if priced else "gpu_hours_per_1000_steps"


def pareto_objectives(rows: Sequence[dict]) -> tuple[str, str, str]:
    return ("step_time_s", "gpus", cost_column(rows))


def pareto_figure(rows: Sequence[dict]) -> go.Figure:
    """Step time against cost per 1,000 steps, marker size by GPUs; the Pareto front (step time, GPUs, cost) in red."""
    objectives = pareto_objectives(rows)
    cost = objectives[2]
    front = {r["point"] for r in pareto_front(rows, objectives)}
    finished = [r for r in rows if r["status"] == "ok" and r.get(cost) is not None]
    fig = go.Figure()
    for name, color, members in (("other points", OK_COLOR, [r for r in finished if r["point"] not in front]),
                                 ("Pareto front", FRONT_COLOR, [r for r in finished if r["point"] in front])):
        fig.add_trace(go.Scatter(
            x=[r[cost] for r in members], y=[r["step_time_s"] for r in members], mode="markers", name=name,
            marker={"color": color, "size": [8 + 14 * (r["gpus"] / max(x["gpus"] for x in finished)) for r in members],
                    "line": {"width": 0}},
            text=[f"{r['point']}<br>{r['gpus']} GPUs" for r in members],
            hovertemplate="%{text}<br>step %{y:.2f} s<br>cost %{x:.2f}<extra></extra>"))
    fig.update_layout(xaxis_title=_title(cost), yaxis_title="mean step time (s)", template="plotly_white",
                      legend={"orientation": "h", "y": 1.08}, margin={"t": 40})
    return fig


def partner_axis(rows: Sequence[dict], axis: str, axes: Sequence[str]) -> str | None:
    """The other varied axis whose values the effect of `axis` is drawn for, one line each: the one with the fewest
    values, so the lines stay few enough to tell apart. None when no other axis varies."""
    finished = [r for r in rows if r["status"] == "ok"]
    others = [a for a in varied_axes(rows, axes) if a != axis]
    return min(others, key=lambda a: len({str(r.get(a)) for r in finished}), default=None)


def effect_figure(rows: Sequence[dict], axis: str, axes: Sequence[str] = (), metric: str = "step_time_s") -> go.Figure:
    """The mean `metric` against one axis's value, one line per value of another of the sweep's `axes` (see
    partner_axis), so an interaction shows as lines that are not parallel; the points themselves too when a line's
    mean is over several of them."""
    finished = [r for r in rows if r["status"] == "ok" and r.get(metric) is not None]
    values = _ordered({r[axis] for r in finished})
    by = partner_axis(finished, axis, axes)
    groups = [("mean", finished)] if by is None else [
        (f"{by} = {value}", [r for r in finished if r[by] == value]) for value in _ordered({r[by] for r in finished})]
    fig = go.Figure()
    if len(finished) > sum(len({str(r[axis]) for r in members}) for _, members in groups):
        fig.add_trace(go.Scatter(x=[str(r[axis]) for r in finished], y=[r[metric] for r in finished], mode="markers",
                                 name="points", marker={"color": OK_COLOR, "size": 7}, text=[r["point"] for r in finished]))
    for name, members in groups:
        at = [v for v in values if any(r[axis] == v for r in members)]
        means = [_mean([r[metric] for r in members if r[axis] == v]) for v in at]
        fig.add_trace(go.Scatter(x=[str(v) for v in at], y=means, mode="lines+markers", name=name,
                                 line={"color": FRONT_COLOR} if by is None else {}))
    fig.update_layout(xaxis_title=axis, yaxis_title=_title(metric), template="plotly_white", margin={"t": 30},
                      legend_title_text=by or "",
                      xaxis={"type": "category", "categoryorder": "array", "categoryarray": [str(v) for v in values]})
    return fig


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def varied_axes(rows: Sequence[dict], axes: Sequence[str]) -> list[str]:
    """Axes that take at least two values among the finished points (the others have no effect to show)."""
    finished = [r for r in rows if r["status"] == "ok"]
    return [axis for axis in axes if len({r.get(axis) for r in finished}) > 1]


def sweep_report_html(run: SweepRun) -> str:
    spec, rows = run.expansion.spec, run.rows
    axes = list(spec.axis_paths)
    objectives = pareto_objectives(rows)
    counts = ", ".join(f"{run.count(s)} {s}" for s in ("ok", "infeasible", "failed") if run.count(s))
    body = [f"<h1>Sweep {html.escape(spec.name)}</h1>",
            f'<p class="context">{len(rows)} points ({counts}) over {", ".join(axes) or "no axes"}; '
            f"{run.expansion.skipped} combinations skipped by constraints, {run.expansion.duplicates} duplicates "
            "run once.</p>",
            f'<p class="note">{html.escape(spec.description)}</p>' if spec.description else ""]
    body.append('<section id="best"><h2>Best points</h2><div class="tables">')
    for title, column, lowest in (("fastest step", "step_time_s", True),
                                  ("most tokens/s per GPU", "tokens_per_s_per_gpu", False),
                                  ("cheapest per 1,000 steps", objectives[2], True)):
        body.append(f"<div><h3>{title}</h3>{_table(best(rows, column, lowest=lowest), ['point', *axes, column])}</div>")
    body.append("</div></section>")
    front = sorted(pareto_front(rows, objectives), key=lambda r: r["step_time_s"])
    body += ['<section id="pareto"><h2>Pareto front</h2><p class="note">Points no other point beats on step time, GPUs '
             f"and {_title(objectives[2])} at once.</p>", figure_div(pareto_figure(rows), "fig-pareto"),
             _table(front, ["point", *axes, *objectives]), "</section>"]
    shown = varied_axes(rows, axes)
    if shown:
        body.append('<section id="effects"><h2>Effect of each axis on step time</h2><p class="note">One line per value '
                    "of another axis: lines that are not parallel show the two axes interact.</p>")
        body += [figure_div(effect_figure(rows, axis, shown), f"fig-effect-{i}") for i, axis in enumerate(shown)]
        body.append("</section>")
    body += ['<section id="results"><h2>All points</h2><p class="note">Each point\'s run folder is points/&lt;point&gt;/;'
             " compare any two with <code>rlsim compare points/A points/B</code>.</p>",
             _table(rows, list(run.columns)), "</section>"]
    return page(f"rlsim sweep: {spec.name}", body)


def _table(rows: Sequence[dict], names: Sequence[str]) -> str:
    head = "<tr>" + "".join(f"<th>{html.escape(_title(n))}</th>" for n in names) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(n)))}</td>" for n in names) + "</tr>" for r in rows)
    return f'<div class="scroll"><table>{head}{body}</table></div>'  # wide tables scroll in their box, not the page


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def _title(column: str) -> str:
    return {"step_time_s": "step time (s)", "usd_per_1000_steps": "$ per 1,000 steps",
            "gpu_hours_per_1000_steps": "GPU-hours per 1,000 steps", "tokens_per_s_per_gpu": "tokens/s per GPU",
            "gpus": "GPUs"}.get(column, column)


def _ordered(values: set) -> list:
    try:
        return sorted(values)
    except TypeError:  # mixed kinds: order by text
        return sorted(values, key=str)
