"""`rlsim replay --html`: logged against simulated seconds per step, one panel per verl timer."""
from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from rlsim.report.html import figure_div, page

if TYPE_CHECKING:  # the report draws what the replay hands it, and never calls back into it
    from rlsim.replay.compare import Replay


def replay_html(result: Replay) -> str:
    """A self-contained page: per timer, the logged and the simulated seconds of every compared step, and the error
    of the mean over steps in the panel's title."""
    columns = 2
    rows = max(1, -(-len(result.timers) // columns))
    titles = []
    for t in result.timers:
        error = t.error_pct()
        titles.append(f"{t.timer} ↔ {' + '.join(t.stages)}" + (f" ({error:+.1f} %)" if error is not None else ""))
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=titles)
    for i, t in enumerate(result.timers):
        row, col = i // columns + 1, i % columns + 1
        figure.add_trace(go.Scatter(x=list(result.steps), y=list(t.logged), mode="lines+markers", name="logged",
                                    showlegend=i == 0, line={"color": "#1f77b4"}), row=row, col=col)
        figure.add_trace(go.Scatter(x=list(result.steps), y=list(t.simulated), mode="lines+markers",
                                    name="simulated", showlegend=i == 0, line={"color": "#d62728"}),
                         row=row, col=col)
        figure.update_xaxes(title_text="logged step", row=row, col=col)
        figure.update_yaxes(title_text="seconds", rangemode="tozero", row=row, col=col)
    figure.update_layout(height=300 * rows, margin={"t": 60})
    notes = [f"<h1>rlsim replay: {html.escape(Path(result.log).name)} on {html.escape(result.scenario)}</h1>",
             f"<p>{len(result.steps)} steps compared, each simulated with its logged lengths."]
    if result.missing:
        notes.append(f" Missing from the log: steps {html.escape(step_ranges(result.missing))}.")
    if result.side_steps:
        notes.append(f" Steps {html.escape(step_ranges(result.side_steps))} also validated or saved a checkpoint: their "
                     "step time is compared without it.")
    notes.append("</p>")
    return page("rlsim replay", ["".join(notes), figure_div(figure, "replay")])


def step_ranges(steps: tuple[int, ...]) -> str:
    """`1, 2, 3, 7` -> `1–3, 7`."""
    parts: list[str] = []
    start = previous = steps[0]
    for n in (*steps[1:], None):
        if n is not None and n == previous + 1:
            previous = n
            continue
        parts.append(str(start) if start == previous else f"{start}–{previous}")
        if n is not None:
            start = previous = n
    return ", ".join(parts)
