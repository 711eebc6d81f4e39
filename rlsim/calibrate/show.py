"""Measured against fitted: the curves of a calibrated profile as a table (with each fit's held-out error) and as an
interactive figure of every curve's points and fitted line (log-log)."""
from __future__ import annotations

from dataclasses import dataclass

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
        for field in ("hbm", "decode_attention"):
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
