"""`rlsim estimate SCENARIO`: analytical stage times of one RL step (no simulation), as a table."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rlsim.cli.exitcodes import OK
from rlsim.cli.overrides import add_set_argument, parse_overrides

if TYPE_CHECKING:
    from rlsim.estimate import StepEstimate


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "estimate", help="napkin-math stage times of one step, without simulating",
        description="Price every stage of one RL step with the cost models at mean lengths, plus a long-tail bound "
        "for generation, and print a table. A quick check for what `rlsim run` simulates.")
    parser.add_argument("scenario", type=Path, help="scenario YAML file")
    add_set_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.config import load_scenario
    from rlsim.config.bound import bind
    from rlsim.estimate import estimate_step

    estimate = estimate_step(bind(load_scenario(args.scenario, parse_overrides(args.overrides))))
    print(json.dumps(estimate.as_dict(), indent=2) if args.json else table(estimate))
    return OK


def table(estimate: StepEstimate) -> str:
    from rlsim.report.terminal import text_table

    rows = [(stage.name, f"{stage.seconds:.2f}", f"{stage.seconds / estimate.step_s if estimate.step_s else 0.0:.1%}",
             stage.note) for stage in estimate.stages]
    rows.append(("step", f"{estimate.step_s:.2f}", "", estimate.overlap))
    lines = [f"estimate of one step: {estimate.scenario}", text_table(("stage", "seconds", "share", "note"), rows,
                                                                      left=(0, 3))]
    lines.append(f"throughput {estimate.tokens_per_s:,.0f} tokens/s ({estimate.tokens_per_s / estimate.gpus:,.0f} "
                 f"per GPU over {estimate.gpus} GPUs); shares of a step can exceed 100% in total when stages overlap")
    return "\n".join(lines)
