"""The `rlsim` command. Each subcommand is a module with `register(subparsers)`; bad input exits 2 with no traceback.

The subcommand modules import only argparse-level things at the top and load their implementation when they run, so
`rlsim --help` answers at once instead of loading the simulator, numpy, pydantic and plotly."""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from rlsim import __version__
from rlsim.cli import (
    calibrate,
    check,
    compare,
    estimate,
    example,
    fit,
    importer,
    plan,
    replay,
    run,
    schema,
    sweep,
    validate,
    workload,
)
from rlsim.cli.exitcodes import BAD_INPUT, CLOSED_PIPE, INFEASIBLE
from rlsim.compiled_engine import engine_build
from rlsim.errors import InfeasibleError, ScenarioError, ScenarioWarning

COMMANDS = (example, check, run, estimate, schema, compare, workload, importer, replay, fit, sweep, plan, validate,
            calibrate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsim",
        description="Simulate GPU clusters running RL post-training of LLMs: step time, where the GPU-seconds go, "
        "and which placement, parallelism and schedule is best.",
    )
    parser.add_argument("--version", action="version", version=f"rlsim {__version__} (engine {engine_build()})")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(build_parser(), argv)
        finally:
            # A pipe buffers stdout, so a reader that went away shows up on this flush, `--help` and `--version` too.
            sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout once more at exit, which would fail again and print a traceback: send it to devnull.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():  # restores the warning printer and filters when the command ends
            warnings.showwarning = _show_warning
            warnings.simplefilter("once", ScenarioWarning)  # a command may load its scenario more than once
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


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A scenario's warnings as one `warning: file:line: field: …` line each, like its errors; others as Python's."""
    if isinstance(message, ScenarioWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


if __name__ == "__main__":
    sys.exit(main())
