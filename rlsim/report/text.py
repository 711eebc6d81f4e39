"""Plain-text summaries for the terminal: one run's headline and the GPU-time breakdown."""
from __future__ import annotations

from rlsim.events import LABELS
from rlsim.report.headline import HEADLINES, format_value, lookup


def headline_text(metrics: dict) -> str:
    """The same figures as the HTML report's summary table, one per line, then where the GPU-time went."""
    width = max(len(h.title) for h in HEADLINES)
    lines = [f"{h.title:<{width}}  {format_value(lookup(metrics, h.path), h.unit)}" for h in HEADLINES]
    return "\n".join(lines + [gpu_time_text(metrics["gpu_seconds_by_label"])])


def gpu_time_text(seconds_by_label: dict[str, float], top: int = 6) -> str:
    total = sum(seconds_by_label.values()) or 1.0
    ranked = sorted((label for label in LABELS if seconds_by_label.get(label)), key=lambda k: -seconds_by_label[k])
    shown = ", ".join(f"{label} {seconds_by_label[label] / total:.1%}" for label in ranked[:top])
    return f"GPU-time: {shown}" + (f", {len(ranked) - top} more labels" if len(ranked) > top else "")
