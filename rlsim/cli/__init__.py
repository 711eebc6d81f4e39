"""The `rlsim` command. Each subcommand is a module with `register(subparsers)`; bad input exits 2 with no traceback."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlsim import __version__
from rlsim.cli import calibrate, check, compare, estimate, plan, run, schema, sweep, validate, workload
from rlsim.cli.exitcodes import BAD_INPUT, INFEASIBLE
from rlsim.errors import InfeasibleError, ScenarioError

COMMANDS = (check, run, estimate, schema, compare, workload, sweep, plan, validate, calibrate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsim",
        description="Simulate GPU clusters running RL post-training of LLMs: step time, where the GPU-seconds go, "
        "and which placement, parallelism and schedule is best.",
    )
    parser.add_argument("--version", action="version", version=f"rlsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ScenarioError as err:
        problems = err.problems
        shown = problems[:10]
        for problem in shown:
            print(f"error: {problem.render()}", file=sys.stderr)
        if len(problems) > len(shown):
            print(f"... and {len(problems) - len(shown)} more problems", file=sys.stderr)
        return BAD_INPUT
    except InfeasibleError as err:
        print(f"infeasible: {err}", file=sys.stderr)
        return INFEASIBLE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
