"""`rlsim calibrate show`'s figure: each calibrated curve's measured medians against its fit, on log-log axes."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:  # the report draws what calibration hands it, and never calls back into it
    from rlsim.calibrate.show import ShownCurve


def write_figure(curves: list[ShownCurve], title: str, out: Path) -> None:
    """One panel per curve: measured medians as points, the fit as a line, both axes logarithmic."""
    columns = 2
    rows = max(1, -(-len(curves) // columns))
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=[c.name for c in curves])
    for i, c in enumerate(curves):
        row, col = i // columns + 1, i % columns + 1
        sizes = [p.size for p in c.curve.points]
        figure.add_trace(go.Scatter(x=sizes, y=[p.value for p in c.curve.points], mode="markers", name="measured",
                                    text=[f"{p.label}<br>{p.source}" for p in c.curve.points], showlegend=i == 0,
                                    marker={"color": "#1f77b4"}), row=row, col=col)
        grid = np.geomspace(min(sizes), max(sizes), 60)
        figure.add_trace(go.Scatter(x=grid, y=[c.fitted_seconds(s) for s in grid], mode="lines", name="fitted",
                                    showlegend=i == 0, line={"color": "#d62728"}), row=row, col=col)
        figure.update_xaxes(type="log", title_text=c.size_unit, row=row, col=col)
        figure.update_yaxes(type="log", title_text="seconds", row=row, col=col)
    figure.update_layout(title=title, height=320 * rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.write_html(out, include_plotlyjs=True)  # self-contained, as the run reports are
