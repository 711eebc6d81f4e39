"""`rlsim plan SCENARIO --gpus N`: the best way to run a workload on N GPUs of one type, ranked and explained."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rlsim.cli.exitcodes import OK
from rlsim.errors import Problem, ScenarioError
from rlsim.plan import Plan, explanation, plan
from rlsim.plan.explain import label_shares
from rlsim.yamlsource import read_yaml

SCHEDULE_MODES = ("sync", "one_step_off", "async")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="rank placements, schedules and layouts for a workload on a GPU budget",
        description="Take the model, algorithm and workload of SCENARIO and find the best way to run them on N GPUs: "
        "enumerate placements (colocated, disaggregated splits, hybrid), schedules (sync, one-step-off, async with "
        "staleness 1, 2, 4) and rollout tensor parallelism; prune by memory and `rlsim estimate`; simulate the best "
        "few; print them ranked by trained tokens/s, with why the winner beats the runner-up.")
    parser.add_argument("scenario", type=Path, help="scenario YAML giving the model, algorithm and workload")
    parser.add_argument("--gpus", required=True, help="GPU budget: one count, or several separated by commas")
    parser.add_argument("--gpu", help="GPU profile (default: the scenario's first pool's)")
    parser.add_argument("--model", help="catalog model to plan for instead of the scenario's")
    parser.add_argument("--schedules", default=",".join(SCHEDULE_MODES),
                        help="schedule modes to consider, comma-separated (default: %(default)s)")
    parser.add_argument("--simulate", type=int, default=4,
                        help="candidates to simulate: the best estimate of each placement, then of other schedules "
                        "(default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="steps per simulation, the first one warm-up "
                        "(default: %(default)s)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="simulations at once (default: this machine's cores)")
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    budgets = _counts(args.gpus)
    schedules = tuple(s.strip() for s in args.schedules.split(",") if s.strip())
    unknown = [s for s in schedules if s not in SCHEDULE_MODES]
    if unknown or not schedules:
        raise ScenarioError(Problem(f"unknown schedule mode(s): {', '.join(unknown) or '(none given)'}",
                                    file="rlsim plan --schedules", valid=", ".join(SCHEDULE_MODES)))
    if args.steps < 2 or args.simulate < 1 or args.workers < 1:
        raise ScenarioError(Problem("--steps must be at least 2 (one warm-up, one measured); --simulate and --workers "
                                    "at least 1", file="rlsim plan"))
    document = read_yaml(args.scenario)
    plans = [plan(document, args.scenario.resolve().parent, gpus=n, gpu=args.gpu, model=args.model,
                  schedules=schedules, simulate=args.simulate, steps=args.steps, warmup_steps=1, workers=args.workers)
             for n in budgets]
    if args.json:
        print(json.dumps([as_dict(p) for p in plans], indent=2))
    else:
        print("\n\n".join(text(p) for p in plans))
    return OK


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ScenarioError(Problem(f"not a GPU count or list of counts: {text!r}", file="rlsim plan --gpus",
                                    valid="e.g. 64, or 16,64,128"))
    return counts


def text(result: Plan) -> str:
    pruned = sum(result.invalid.values()) + sum(result.infeasible.values())
    lines = [f"plan for {result.workload} on {result.gpus} × {result.gpu}",
             f"{result.considered} candidates: {sum(result.invalid.values())} invalid, "
             f"{sum(result.infeasible.values())} do not fit in memory, {len(result.estimated)} estimated "
             f"({pruned} pruned); simulated the best {len(result.ranked)} for {result.steps} steps (1 warm-up)"]
    for reason, count in sorted(result.infeasible.items(), key=lambda item: -item[1])[:3]:
        lines.append(f"  does not fit ({count}): {reason}")
    head = (f"{'rank':>4}  {'candidate':<62}{'est. step s':>12}{'step s':>9}{'tokens/s':>11}{'per GPU':>9}"
            f"{'busy':>7}{'idle':>7}{'stale':>7}{'$/1k steps':>12}")
    lines += ["", head]
    for rank, evaluated in enumerate(result.ranked, 1):
        m = evaluated.metrics
        assert m is not None
        cost = m["cost"]["usd_per_1000_steps"]
        lines.append(f"{rank:>4}  {evaluated.candidate.label:<62}{evaluated.estimate_s:>12.1f}{evaluated.step_s:>9.1f}"
                     f"{evaluated.tokens_per_s:>11,.0f}{m['throughput']['tokens_per_s_per_gpu']:>9,.0f}"
                     f"{m['utilisation']['busy']:>7.0%}{m['utilisation']['idle']:>7.0%}{m['staleness']['mean']:>7.2f}"
                     f"{'' if cost is None else f'{cost:,.0f}':>12}")
    lines += ["", explanation(result)]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def as_dict(result: Plan) -> dict:
    return {"gpus": result.gpus, "gpu": result.gpu, "workload": result.workload, "considered": result.considered,
            "invalid": result.invalid, "infeasible": result.infeasible, "estimated": len(result.estimated),
            "ranked": [{"candidate": e.candidate.label, "placement": e.candidate.placement,
                        "schedule": e.candidate.schedule.label, "rollout_gpus": e.candidate.rollout_gpus,
                        "training_gpus": e.candidate.training_gpus, "rollout_tp": e.candidate.rollout_tp,
                        "estimated_step_s": e.estimate_s, "step_s": e.step_s, "tokens_per_s": e.tokens_per_s,
                        "gpu_time_shares": label_shares(e.metrics or {})}
                       for e in result.ranked],
            "why": explanation(result), "notes": list(result.notes)}
