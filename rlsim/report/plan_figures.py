"""A plan's figure: where each simulated candidate's GPU-time went, one bar per candidate in rank order."""
from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from rlsim.events import LABELS
from rlsim.metrics.labels import label_shares
from rlsim.report.colors import LABEL_COLORS

if TYPE_CHECKING:  # the report draws what the planner hands it, and never calls back into it
    from rlsim.plan.planner import Plan


def gpu_time_figure(result: Plan) -> go.Figure:
    """Share of GPU-time by label for each simulated candidate, the winner on top, with its trained tokens/s."""
    ranked = result.ranked
    names = [f"#{i + 1} {e.candidate.label} ({e.tokens_per_s:,.0f} tokens/s)" for i, e in enumerate(ranked)]
    shares = [label_shares(e.metrics or {}) for e in ranked]
    fig = go.Figure()
    for label in LABELS:
        values = [s[label] for s in shares]
        if any(v > 0 for v in values):
            fig.add_trace(go.Bar(y=names, x=values, name=label, orientation="h", marker_color=LABEL_COLORS[label],
                                 hovertemplate=f"{label}: %{{x:.1%}}<extra></extra>"))
    fig.update_layout(barmode="stack", template="plotly_white", xaxis={"tickformat": ".0%", "title": "share of GPU-time"},
                      yaxis={"autorange": "reversed"}, title=f"{result.gpus} × {result.gpu}: where the GPU-time goes",
                      legend={"orientation": "h", "y": -0.2}, margin={"l": 20, "r": 20, "t": 50},
                      height=180 + 45 * len(ranked))
    return fig
