"""The parity plot: simulated against published, log-log, one point per figure, as a small self-contained SVG
(no plotting library or browser needed, so `rlsim validate` can write it anywhere)."""
from __future__ import annotations

import math
from html import escape

from rlsim.validation.table import WORST_BOUND_PCT, FigureRow

SIZE = 520  # px, square plot area plus margins
MARGIN = 60
# One colour per unit family, from the Okabe–Ito colour-blind-safe palette (Okabe & Ito 2008, "Color Universal Design").
COLOURS = {"s": "#0072B2", "tokens/s": "#E69F00", "tokens/s/GPU": "#009E73", "%": "#CC79A7"}


def _decades(low: float, high: float) -> range:
    return range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)


def parity_svg(rows: tuple[FigureRow, ...], title: str = "rlsim: simulated vs published") -> str:
    """An SVG document with every row as a point, the parity line, and the ±WORST_BOUND_PCT band."""
    rows = tuple(r for r in rows if r.published is not None and r.published > 0 and r.simulated > 0)
    values = [v for r in rows for v in (r.published, r.simulated)]
    decades = _decades(min(values), max(values)) if values else range(0, 2)
    lo, hi = decades.start, decades.stop - 1
    hi = max(hi, lo + 1)
    span = SIZE - 2 * MARGIN

    def place(value: float) -> float:
        return MARGIN + span * (math.log10(value) - lo) / (hi - lo)

    def point(x: float, y: float) -> tuple[float, float]:
        return place(x), SIZE - place(y)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{SIZE}" height="{SIZE}" viewBox="0 0 {SIZE} {SIZE}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect width="{SIZE}" height="{SIZE}" fill="white"/>',
             f'<text x="{SIZE / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<text x="{SIZE / 2}" y="{SIZE - 12}" text-anchor="middle">published (log scale)</text>',
             f'<text x="14" y="{SIZE / 2}" text-anchor="middle" transform="rotate(-90 14 {SIZE / 2})">'
             'simulated (log scale)</text>']
    for decade in range(lo, hi + 1):
        at = place(10.0**decade)
        label = f"1e{decade}" if abs(decade) > 3 else f"{10.0**decade:g}"
        parts += [f'<line x1="{at:.1f}" y1="{MARGIN}" x2="{at:.1f}" y2="{SIZE - MARGIN}" stroke="#ddd"/>',
                  f'<line x1="{MARGIN}" y1="{SIZE - at:.1f}" x2="{SIZE - MARGIN}" y2="{SIZE - at:.1f}" stroke="#ddd"/>',
                  f'<text x="{at:.1f}" y="{SIZE - MARGIN + 16}" text-anchor="middle">{label}</text>',
                  f'<text x="{MARGIN - 6}" y="{SIZE - at + 4:.1f}" text-anchor="end">{label}</text>']
    low, high = 10.0**lo, 10.0**hi
    for factor, dash in ((1.0, ""), (1 + WORST_BOUND_PCT / 100, ' stroke-dasharray="4 3"'),
                         (1 - WORST_BOUND_PCT / 100, ' stroke-dasharray="4 3"')):
        (x1, y1), (x2, y2) = point(low, low * factor), point(high, high * factor)
        parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#555"{dash}/>')
    parts.append(f'<rect x="{MARGIN}" y="{MARGIN}" width="{span}" height="{span}" fill="none" stroke="#333"/>')
    for r in rows:
        assert r.published is not None and r.error_pct is not None
        x, y = point(r.published, r.simulated)
        tip = escape(f"{r.case} {r.figure}: published {r.published:g}, simulated {r.simulated:.4g} "
                     f"({r.error_pct:+.1f}%)")
        fill = COLOURS.get(r.unit, "#000")
        shape = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4"' if r.is_time
                 else f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7"')
        parts.append(f'{shape} fill="{fill}" fill-opacity="0.8"><title>{tip}</title>'
                     f'{"</circle>" if r.is_time else "</rect>"}')
    legend_y = MARGIN + 12
    for unit, colour in COLOURS.items():
        parts.append(f'<rect x="{MARGIN + 8}" y="{legend_y - 8}" width="8" height="8" fill="{colour}"/>'
                     f'<text x="{MARGIN + 20}" y="{legend_y}">{escape(unit)}</text>')
        legend_y += 14
    parts.append(f'<text x="{MARGIN + 8}" y="{legend_y + 4}">circles: step/stage times; squares: other figures; '
                 f'dashed: ±{WORST_BOUND_PCT:g}%</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
