"""Plain-text summaries for the terminal: the per-step lines, one run's headline and the GPU-time breakdown."""
from __future__ import annotations

import textwrap

from rlsim.events import LABELS, STAGES, StepRecord
from rlsim.report.headline import format_value, lookup, shown


def headline_text(metrics: dict) -> str:
    """Which steps were measured, the same figures as the HTML report's summary table, one per line, then where the
    GPU-time went."""
    headlines = shown(metrics)
    width = max(len(h.title) for h in headlines)
    lines = [f"{h.title:<{width}}  {format_value(lookup(metrics, h.path), h.unit)}" for h in headlines]
    measured = metrics.get("measured")  # run folders written before it existed have none
    if measured:
        lines.insert(0, f"{'measured over':<{width}}  {measured['window']}")
    return "\n".join(lines + [gpu_time_text(metrics["gpu_seconds_by_label"])])


def gpu_time_text(seconds_by_label: dict[str, float], top: int = 6) -> str:
    total = sum(seconds_by_label.values()) or 1.0
    ranked = sorted((label for label in LABELS if seconds_by_label.get(label)), key=lambda k: -seconds_by_label[k])
    shown = ", ".join(f"{label} {seconds_by_label[label] / total:.1%}" for label in ranked[:top])
    return f"GPU-time: {shown}" + (f", {len(ranked) - top} more labels" if len(ranked) > top else "")

STEP_HEADER = f"{'step':>4}{'time s':>10}  seconds per verl stage"
_INDENT = " " * 16


def step_line(step: StepRecord, warmup_steps: int, width: int = 120) -> str:
    """One step, wrapped at spaces to `width` (never mid-word) with its stages indented under the first."""
    stages = " · ".join(f"{name} {step.stages[name]:.2f}" for name in STAGES if step.stages.get(name, 0.0) > 0)
    mark = "warm-up · " if step.step < warmup_steps else ""
    text = f"{step.step:>4}{step.seconds:>10.2f}  {mark}{stages}"
    return textwrap.fill(text, width=max(width, 40), subsequent_indent=_INDENT, break_long_words=False,
                         break_on_hyphens=False)
