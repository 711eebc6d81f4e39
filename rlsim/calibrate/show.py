"""Measured against fitted: the curves of a calibrated profile as a table (with each fit's held-out error) and as an
interactive figure of every curve's points and fitted line (log-log)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlsim.hardware import FittedCurve, HardwareCatalog


@dataclass(frozen=True)
class ShownCurve:
    """One fitted curve of a profile: its name, its rate in the unit named, and the curve itself."""

    name: str
    rate: float
    rate_unit: str
    size_unit: str
    curve: FittedCurve

    def fitted_seconds(self, size: float) -> float:
        per_second = {"TFLOP/s": 1e12, "GB/s": 1e9}[self.rate_unit]
        return self.curve.fixed_us.value * 1e-6 + size / (self.rate * per_second)


def profile_curves(catalog: HardwareCatalog, gpu_name: str) -> list[ShownCurve]:
    """Every fitted curve of a GPU profile and of the links it uses; empty when the profile is not calibrated."""
    gpu = catalog.gpu(gpu_name)
    curves: list[ShownCurve] = []
    if gpu.calibration is not None:
        cal = gpu.calibration
        curves += [ShownCurve(f"gemm {c.dtype}", c.tflops.value, "TFLOP/s", "FLOP (quantized)", c) for c in cal.gemm]
        if cal.attention_prefill is not None:
            curves.append(ShownCurve("attention prefill", cal.attention_prefill.tflops.value, "TFLOP/s", "FLOP",
                                     cal.attention_prefill))
        for field in ("hbm", "decode_attention", "host_to_device", "device_to_host"):
            curve = getattr(cal, field)
            if curve is not None:
                curves.append(ShownCurve(field.replace("_", " "), curve.gbyte_per_s.value, "GB/s", "bytes", curve))
    links = catalog.links(gpu)
    for link in (links.scale_up, links.scale_out, links.host):
        if link is not None and link.calibration is not None:
            curves += [ShownCurve(f"{c.op} {c.ranks.value} ranks {c.nodes.value} node(s) [{link.name}]",
                                  c.busbw_gbyte_per_s.value, "GB/s", "bytes x bus factor", c)
                       for c in link.calibration.collectives]
    return curves


def curve_table(curves: list[ShownCurve]) -> str:
    lines = [f"{'curve':<60}{'points':>7}{'fixed us':>11}{'rate':>12} {'unit':<8}{'held-out MAPE':>14}"]
    for c in curves:
        mape = "n/a" if c.curve.held_out_mape_pct is None else f"{c.curve.held_out_mape_pct.value:.1f}%"
        table = getattr(c.curve, "table_held_out_mape_pct", None)
        if table is not None:
            mape = f"{mape} (table {table.value:.1f}%)"
        lines.append(f"{c.name:<60}{len(c.curve.points):>7}{c.curve.fixed_us.value:>11.2f}{c.rate:>12.4g} {c.rate_unit:<8}"
                     f"{mape:>14}")
    return "\n".join(lines)


def write_figure(curves: list[ShownCurve], title: str, out: Path) -> None:
    """One panel per curve: measured medians as points, the fit as a line, both axes logarithmic."""
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

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
