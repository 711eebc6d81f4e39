"""`rlsim workload fit TRACE --out model.yaml` and `rlsim workload show SPEC`.

fit   fits workload models to a PolyTrace trace (packed lengths, multi-turn log, reward timings, DAPO filter indices, or
      the production parameters JSON) and writes the `workload:` fields as YAML, then prints how the fitted model's
      samples compare with the trace.
show  reads a scenario, a workload file (the fields under `workload:`) or a single length model (a mapping with
      `kind`), draws samples through the simulator's own group sampler, prints mean, p50, p90, p99, max and the
      truncated share of prompt and response lengths, and writes a self-contained histogram page (plotly.js inlined,
      opens offline).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.cli.lazy import lazy_handler


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("workload", help="fit workload models to traces, and show a workload's lengths",
                                   description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="workload_command", metavar="COMMAND", required=True)

    fit = commands.add_parser("fit", help="fit a parametric workload model to a trace")
    fit.add_argument("trace", type=Path, help="trace file or folder (PolyTrace formats)")
    fit.add_argument("--out", type=Path, required=True, help="YAML file to write the workload fields to")
    fit.add_argument("--max-response-tokens", type=int, default=None, dest="cap",
                     help="the cap the trace was generated under (default: its longest length, when several hit it)")
    fit.add_argument("--drift", action="store_true", help="fit each recorded step and interpolate between them")
    fit.set_defaults(handler=lazy_handler("rlsim.cli.workload_fit", "run_fit"))

    show = commands.add_parser("show", help="statistics and a histogram page of a workload's lengths")
    show.add_argument("spec", type=Path, help="scenario, workload or length-model YAML file")
    show.add_argument("--html", type=Path, default=None,
                      help="histogram page to write (default: <SPEC name>-lengths.html in the current directory)")
    show.add_argument("--groups", type=int, default=4096, help="prompt groups to draw (default: 4096)")
    show.add_argument("--step", type=int, default=0, help="policy version to draw at (drifting workloads)")
    show.add_argument("--max-response-tokens", type=int, default=None, dest="cap",
                      help="response cap for a workload or length-model file (a scenario has its own)")
    show.add_argument("--samples-per-prompt", type=int, default=8, help="for a workload or length-model file")
    show.set_defaults(handler=lazy_handler("rlsim.cli.workload_show", "run_show"))

