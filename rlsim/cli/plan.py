"""`rlsim plan SCENARIO --gpus N`: the best way to run a workload on N GPUs of one type, ranked and explained."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlsim.cli.exitcodes import OK
from rlsim.cli.overrides import (
    add_calibration_argument,
    add_set_argument,
    calibration_overrides,
    parse_overrides,
)
from rlsim.errors import Problem, ScenarioError
from rlsim.plan.candidates import LAYOUTS, MEASURED_STEPS, RANKINGS, REFINE, SCHEDULES

SCHEDULE_MODES = tuple(dict.fromkeys(schedule.mode for schedule in SCHEDULES))  # the modes the planner enumerates


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="rank placements, schedules and layouts for a workload on a GPU budget",
        description="Take the model, algorithm and workload of SCENARIO and find the best way to run them on N GPUs: "
        "enumerate placements (colocated, disaggregated splits, hybrid), schedules (sync, one-step-off, async with "
        "staleness 1, 2, 4) and rollout tensor parallelism; prune by memory and `rlsim estimate`; simulate the best "
        "few; print them ranked by trained tokens/s, with why the winner beats the runner-up. --set changes the "
        "scenario before planning; the planner then sets placement, schedule and run length itself.")
    parser.add_argument("scenario", type=Path, help="scenario YAML giving the model, algorithm and workload")
    parser.add_argument("--gpus", required=True,
                        help="GPU budget: a count, a range START-STOP[:STEP] (STEP defaults to START), or several "
                        "separated by commas, e.g. 64, 16,64,128 or 16-128:16")
    parser.add_argument("--gpu", help="GPU profile (default: the scenario's first pool's)")
    parser.add_argument("--pool", metavar="GPU:COUNT",
                        help="a second pool of another GPU type beside the --gpus, e.g. h20:64: the plan then also "
                        "gives one pool the rollout and the other the training, each way round")
    parser.add_argument("--model", help="model to plan for instead of the scenario's: a catalog name, a Hugging Face "
                        "id or a config.json")
    add_set_argument(parser)
    add_calibration_argument(parser)
    parser.add_argument("--schedules", default=",".join(SCHEDULE_MODES),
                        help="schedule modes to consider, comma-separated (default: %(default)s)")
    parser.add_argument("--simulate", type=int, default=4,
                        help="candidates to simulate: the best estimate of each placement, then of other schedules "
                        "(default: %(default)s)")
    parser.add_argument("--refine", type=int, default=REFINE,
                        help="extra simulations that move the winner's split one eighth of the GPUs at a time, and an "
                        "async winner's staleness bound one step or its weight updates between interrupt and in-flight, "
                        "while it improves; 0 ranks the shortlist only (default: %(default)s)")
    parser.add_argument("--layouts", type=int, default=LAYOUTS,
                        help="extra simulations of each placement's best candidate with other training layouts "
                        "(tensor, pipeline, context and expert parallelism, ZeRO stage, activation recompute), the "
                        "best estimates of those that fit in memory; 0 keeps the scenario's layout (default: "
                        "%(default)s)")
    parser.add_argument("--steps", type=int, default=MEASURED_STEPS,
                        help="steps each simulation measures, after its schedule's pipeline fill (a one-step-off run "
                        "warms up for 2 steps, an async one for its staleness bound + 1) (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=None,
                        help="simulations at once (default: the cores not already busy; results do not change)")
    parser.add_argument("--rank", choices=RANKINGS, default="throughput",
                        help="rank the simulated candidates by trained tokens/s (throughput) or by goodput over the "
                        "scenario's run.horizon, failures, restarts, checkpoints and evaluation paid for (default: "
                        "%(default)s)")
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    parser.add_argument("--out", type=Path, metavar="FILE.html",
                        help="also write the ranking and the GPU-time figure as one offline HTML page")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.cli.cores import free_cores
    from rlsim.plan import plan
    from rlsim.plan.text import budget_summary, plan_dict, plan_text

    if args.workers is None:
        args.workers = free_cores()
    budgets = _counts(args.gpus)
    overrides = {**calibration_overrides(args.calibration), **parse_overrides(args.overrides)}
    schedules = tuple(s.strip() for s in args.schedules.split(",") if s.strip())
    unknown = [s for s in schedules if s not in SCHEDULE_MODES]
    if unknown or not schedules:
        raise ScenarioError(Problem(f"unknown schedule mode(s): {', '.join(unknown) or '(none given)'}",
                                    file="rlsim plan --schedules", valid=", ".join(SCHEDULE_MODES)))
    if args.steps < 1 or args.simulate < 1 or args.workers < 1 or args.refine < 0 or args.layouts < 0:
        raise ScenarioError(Problem("--steps, --simulate and --workers must be at least 1; --refine and --layouts at "
                                    "least 0", file="rlsim plan"))
    plans = [plan(args.scenario, gpus=n, gpu=args.gpu, model=args.model, overrides=overrides,
                  schedules=schedules, simulate=args.simulate, measured_steps=args.steps, workers=args.workers,
                  refine=args.refine, layouts=args.layouts, pool=_pool(args.pool), rank=args.rank,
                  progress=sys.stderr)
             for n in budgets]
    if args.json:
        print(json.dumps([plan_dict(p) for p in plans], indent=2))
    else:
        print("\n\n".join(plan_text(p) for p in plans))
        if len(plans) > 1:
            print("\n" + budget_summary(plans))
    if args.out:
        from rlsim.plan.page import plan_html

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(plan_html(plans), encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr if args.json else sys.stdout)
    return OK


def _counts(text: str) -> list[int]:
    counts: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            span, _, step = part.partition(":")
            start, dash, stop = span.partition("-")
            first = int(start)
            counts += list(range(first, int(stop) + 1, int(step or first))) if dash else [first]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ScenarioError(Problem(f"not a GPU count, range or list of them: {text!r}", file="rlsim plan --gpus",
                                    valid="e.g. 64, 16,64,128 or 16-128:16"))
    return sorted(set(counts))


def _pool(text: str | None) -> tuple[str, int] | None:
    """`h20:64` -> ("h20", 64)."""
    if text is None:
        return None
    gpu, _, count = text.rpartition(":")
    if not gpu or not count.isdigit() or int(count) < 1:
        raise ScenarioError(Problem(f"not a pool: {text!r}", file="rlsim plan --pool", value=text,
                                    valid="GPU:COUNT, e.g. h20:64"))
    return gpu, int(count)
