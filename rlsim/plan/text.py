"""A plan as text (the ranked table and the explanation) and as JSON-ready data."""
from __future__ import annotations

from rlsim.metrics.labels import label_shares
from rlsim.plan.explain import explanation
from rlsim.plan.planner import Plan
from rlsim.report.terminal import text_table

GOODPUT_HEADERS = ("goodput/s", "kept")
RANKING_HEADERS = ("rank", "candidate", "est. step s", "step s", "tokens/s", "per GPU", "busy", "idle", "stale",
                   "$/1k steps")


def plan_text(result: Plan) -> str:
    """The ranked table and why the winner wins, as `rlsim plan` prints it."""
    pruned = sum(result.invalid.values()) + sum(result.infeasible.values())
    lines = [f"plan for {result.workload} on {result.cluster}",
             f"{result.considered} candidates: {sum(result.invalid.values())} invalid, "
             f"{sum(result.infeasible.values())} do not fit in memory, {len(result.estimated)} estimated "
             f"({pruned} pruned); simulated the best {len(result.ranked)} for {result.measured_steps} steps each "
             f"after its pipeline filled"]
    for reason, count in sorted(result.infeasible.items(), key=lambda item: -item[1])[:3]:
        lines.append(f"  does not fit ({count}): {reason}")
    rows = []
    by_goodput = result.rank == "goodput"
    for rank, evaluated in enumerate(result.ranked, 1):
        m = evaluated.metrics
        assert m is not None
        cost = m["cost"]["usd_per_1000_steps"]
        goodput = (f"{m['goodput']['tokens_per_s']:,.0f}", f"{m['goodput']['fraction']:.0%}") if by_goodput else ()
        rows.append((rank, evaluated.candidate.label, f"{evaluated.estimate_s:.1f}", f"{evaluated.step_s:.1f}",
                     f"{evaluated.tokens_per_s:,.0f}", *goodput, f"{m['throughput']['tokens_per_s_per_gpu']:,.0f}",
                     f"{m['utilisation']['busy']:.0%}", f"{m['utilisation']['idle']:.0%}",
                     f"{m['staleness']['mean']:.2f}", "" if cost is None else f"{cost:,.0f}"))
    headers = RANKING_HEADERS[:5] + GOODPUT_HEADERS + RANKING_HEADERS[5:] if by_goodput else RANKING_HEADERS
    ranked_by = ["ranked by goodput over run.horizon: trained tokens/s once failures, restarts, checkpoints and "
                 "evaluation are paid for, and the share of the horizon spent on kept steps"] if by_goodput else []
    lines += ["", *ranked_by, text_table(headers, rows, left=(1,)), "", explanation(result)]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def plan_dict(result: Plan) -> dict:
    """The plan as JSON-ready data (`rlsim plan --json`)."""
    pool = {"pool": {"gpu": result.pool[0], "gpus": result.pool[1]}} if result.pool else {}
    return {"gpus": result.gpus, "gpu": result.gpu, **pool, "rank": result.rank, "workload": result.workload,
            "considered": result.considered,
            "invalid": result.invalid, "infeasible": result.infeasible, "estimated": len(result.estimated),
            "ranked": [{"candidate": e.candidate.label, "placement": e.candidate.placement,
                        "schedule": e.candidate.schedule.label, "rollout_gpus": e.candidate.rollout_gpus,
                        "training_gpus": e.candidate.training_gpus, "rollout_tp": e.candidate.rollout_tp,
                        "estimated_step_s": e.estimate_s, "step_s": e.step_s, "tokens_per_s": e.tokens_per_s,
                        **({"goodput_tokens_per_s": e.goodput_tokens_per_s} if result.rank == "goodput" else {}),
                        "gpu_time_shares": label_shares(e.metrics or {})}
                       for e in result.ranked],
            "why": explanation(result), "notes": list(result.notes)}


def budget_summary(plans: list[Plan]) -> str:
    """The winner of each GPU budget, one line each: how the best choice and its throughput change with scale."""
    rows = [(result.gpus, result.winner.candidate.label, f"{result.winner.tokens_per_s:,.0f}",
             f"{result.winner.tokens_per_s / result.total_gpus:,.0f}", f"{result.winner.step_s:.1f}") for result in plans]
    return text_table(("GPUs", "winner", "tokens/s", "per GPU", "step s"), rows, left=(1,))
