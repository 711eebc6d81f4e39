"""A plan as text (the ranked table and the explanation) and as JSON-ready data."""
from __future__ import annotations

from rlsim.plan.explain import explanation, label_shares
from rlsim.plan.planner import Plan

# Wide enough for the longest label, e.g. "disaggregated 224 rollout + 32 train, rollout tp4, async η=4 in-flight".
LABEL_WIDTH = 74


def plan_text(result: Plan) -> str:
    """The ranked table and why the winner wins, as `rlsim plan` prints it."""
    pruned = sum(result.invalid.values()) + sum(result.infeasible.values())
    lines = [f"plan for {result.workload} on {result.gpus} × {result.gpu}",
             f"{result.considered} candidates: {sum(result.invalid.values())} invalid, "
             f"{sum(result.infeasible.values())} do not fit in memory, {len(result.estimated)} estimated "
             f"({pruned} pruned); simulated the best {len(result.ranked)} for {result.measured_steps} steps each "
             f"after its pipeline filled"]
    for reason, count in sorted(result.infeasible.items(), key=lambda item: -item[1])[:3]:
        lines.append(f"  does not fit ({count}): {reason}")
    head = (f"{'rank':>4}  {'candidate':<{LABEL_WIDTH}}{'est. step s':>12}{'step s':>9}{'tokens/s':>11}{'per GPU':>9}"
            f"{'busy':>7}{'idle':>7}{'stale':>7}{'$/1k steps':>12}")
    lines += ["", head]
    for rank, evaluated in enumerate(result.ranked, 1):
        m = evaluated.metrics
        assert m is not None
        cost = m["cost"]["usd_per_1000_steps"]
        lines.append(f"{rank:>4}  {evaluated.candidate.label:<{LABEL_WIDTH}}{evaluated.estimate_s:>12.1f}{evaluated.step_s:>9.1f}"
                     f"{evaluated.tokens_per_s:>11,.0f}{m['throughput']['tokens_per_s_per_gpu']:>9,.0f}"
                     f"{m['utilisation']['busy']:>7.0%}{m['utilisation']['idle']:>7.0%}{m['staleness']['mean']:>7.2f}"
                     f"{'' if cost is None else f'{cost:,.0f}':>12}")
    lines += ["", explanation(result)]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def plan_dict(result: Plan) -> dict:
    """The plan as JSON-ready data (`rlsim plan --json`)."""
    return {"gpus": result.gpus, "gpu": result.gpu, "workload": result.workload, "considered": result.considered,
            "invalid": result.invalid, "infeasible": result.infeasible, "estimated": len(result.estimated),
            "ranked": [{"candidate": e.candidate.label, "placement": e.candidate.placement,
                        "schedule": e.candidate.schedule.label, "rollout_gpus": e.candidate.rollout_gpus,
                        "training_gpus": e.candidate.training_gpus, "rollout_tp": e.candidate.rollout_tp,
                        "estimated_step_s": e.estimate_s, "step_s": e.step_s, "tokens_per_s": e.tokens_per_s,
                        "gpu_time_shares": label_shares(e.metrics or {})}
                       for e in result.ranked],
            "why": explanation(result), "notes": list(result.notes)}


def budget_summary(plans: list[Plan]) -> str:
    """The winner of each GPU budget, one line each: how the best choice and its throughput change with scale."""
    lines = [f"{'GPUs':>6}  {'winner':<{LABEL_WIDTH}}{'tokens/s':>11}{'per GPU':>9}{'step s':>9}"]
    for result in plans:
        best = result.winner
        lines.append(f"{result.gpus:>6}  {best.candidate.label:<{LABEL_WIDTH}}{best.tokens_per_s:>11,.0f}"
                     f"{best.tokens_per_s / result.gpus:>9,.0f}{best.step_s:>9.1f}")
    return "\n".join(lines)
