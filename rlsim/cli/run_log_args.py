"""The arguments `rlsim replay` and `rlsim fit` share: the run's log, the scenario of its setup, a window of its
steps, and reading the log through that window."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlsim.runlog import RunLog


def add_run_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", type=Path, help="the run's per-step metrics: verl console log, CSV or JSON")
    parser.add_argument("--scenario", type=Path, required=True, help="scenario YAML describing the run's setup")
    parser.add_argument("--steps", default=None, metavar="FIRST-LAST",
                        help="only the logged steps numbered FIRST to LAST (both included; FIRST- and -LAST leave an "
                        "end open), e.g. 2-52 for the first quarter of a 210-step run")


def read_log_window(args: argparse.Namespace) -> RunLog:
    """The run log, cut to `--steps` when given."""
    from rlsim.runlog import parse_step_window, read_run_log

    log = read_run_log(args.log)
    return log if args.steps is None else log.window(*parse_step_window(args.steps))
