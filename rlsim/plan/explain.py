"""Why the winner of a plan wins: its throughput against the runner-up's, and where each one's GPU-seconds went —
busy, communication, memory and every idle label (tail, starved, barrier, staleness_block, ...)."""
from __future__ import annotations

from rlsim.events import IDLE_LABELS, LABELS
from rlsim.metrics.labels import label_shares
from rlsim.plan.planner import Evaluated, Plan

CATEGORIES = ("busy", "communication", "memory", "idle")


def explanation(plan: Plan) -> str:
    """The winner against the runner-up; when they share a placement, also against the best other placement."""
    winner = plan.winner
    if len(plan.ranked) < 2:
        return f"{winner.candidate.label} is the only candidate simulated."
    runner = plan.ranked[1]
    parts = [_versus(winner, runner, "the runner-up")]
    if plan.rank == "goodput":
        parts.insert(0, _goodput_versus(winner, runner))
    other = next((e for e in plan.ranked[1:] if e.candidate.placement != winner.candidate.placement), None)
    if runner.candidate.placement == winner.candidate.placement and other is not None:
        parts.append(_versus(winner, other, f"the best {other.candidate.placement} placement"))
    return "\n".join(parts)


def _versus(winner: Evaluated, runner: Evaluated, role: str) -> str:
    assert winner.metrics is not None and runner.metrics is not None
    lines = [f"why {winner.candidate.label} beats {role}, {runner.candidate.label}: {winner.tokens_per_s:,.0f} "
             f"trained tokens/s against {runner.tokens_per_s:,.0f} ({winner.tokens_per_s / runner.tokens_per_s - 1:+.1%};"
             f" step {winner.step_s:.1f} s vs {runner.step_s:.1f} s; mean staleness "
             f"{winner.metrics['staleness']['mean']:.2f} vs {runner.metrics['staleness']['mean']:.2f})."]
    lines.append(f"  {'share of GPU-time':<22}{'winner':>10}{'other':>11}")
    for category in CATEGORIES:
        lines.append(f"  {category:<22}{winner.metrics['utilisation'][category]:>10.1%}"
                     f"{runner.metrics['utilisation'][category]:>11.1%}")
    ours, theirs = label_shares(winner.metrics), label_shares(runner.metrics)
    for label in IDLE_LABELS:
        if ours[label] > 0.0005 or theirs[label] > 0.0005:
            lines.append(f"    idle: {label:<14}{ours[label]:>10.1%}{theirs[label]:>11.1%}")
    lines.append("  " + _largest_differences(ours, theirs))
    return "\n".join(lines)


def _goodput_versus(winner: Evaluated, runner: Evaluated) -> str:
    """Ranked by goodput: what each delivers over the horizon, and where the difference comes from beside the step."""
    assert winner.metrics is not None and runner.metrics is not None
    ours, theirs = winner.metrics["goodput"], runner.metrics["goodput"]
    return (f"by goodput over run.horizon, {winner.candidate.label} delivers {ours['tokens_per_s']:,.0f} trained "
            f"tokens/s against {runner.candidate.label}'s {theirs['tokens_per_s']:,.0f}: {ours['fraction']:.1%} vs "
            f"{theirs['fraction']:.1%} of the horizon on kept steps, checkpoints of {ours['save_s']:,.1f} s vs "
            f"{theirs['save_s']:,.1f} s, {ours['failures']} vs {theirs['failures']} failures sampled.")


def _largest_differences(ours: dict[str, float], theirs: dict[str, float]) -> str:
    """The labels whose shares differ most, in words."""
    ranked = sorted(LABELS, key=lambda label: (-abs(ours[label] - theirs[label]), label))[:3]
    parts = [f"{label} {theirs[label]:.0%} of the other's GPU-time vs {ours[label]:.0%} of the winner's"
             for label in ranked if abs(ours[label] - theirs[label]) >= 0.005]
    return "largest differences: " + ("; ".join(parts) if parts else "none above half a share point") + "."
