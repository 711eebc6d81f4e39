"""`rlsim replay LOG --scenario S`: simulate the steps a run logged, each with that step's logged lengths, and print
each stage logged against simulated, per step and overall.

LOG is verl's console output (`step:N - key:value - ...` lines, Ray prefixes and colours allowed, other output
skipped) or a metrics table exported from an experiment tracker (CSV with a header row; JSON as a list of per-step
objects, an object of per-key lists, or JSON lines) with verl's metric names. See docs/replay.md.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rlsim.cli.exitcodes import OK
from rlsim.cli.lazy import lazy_handler
from rlsim.cli.overrides import add_set_argument
from rlsim.cli.run_log_args import add_run_log_arguments, read_log_window

if TYPE_CHECKING:
    from rlsim.replay.compare import Replay
    from rlsim.runlog import RunLog


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("replay", help="simulate a logged run's steps with its logged lengths and show "
                                   "rlsim's error on each stage", description=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_log_arguments(parser)
    parser.add_argument("--html", type=Path, default=None, help="write logged vs simulated stage times per step here")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of tables")
    parser.add_argument("--lengths-out", type=Path, default=None, dest="lengths_out",
                        help="also write one steady length model of the replayed steps (their average logged "
                        "statistics) as workload fields to paste under `workload:` for what-ifs on this run")
    add_set_argument(parser)
    parser.set_defaults(handler=lazy_handler("rlsim.cli.replay", "run_replay"))


def run_replay(args: argparse.Namespace) -> int:
    from rlsim.cli.overrides import parse_overrides
    from rlsim.replay.compare import replay

    overrides = parse_overrides(args.overrides)
    log = read_log_window(args)
    result = replay(args.scenario, log, overrides)
    if args.json:
        print(json.dumps(result.as_dict(), indent=1))
    else:
        print(replay_text(result))
    if args.lengths_out is not None:
        _write_lengths(args, log, overrides)
    if args.html is not None:
        from rlsim.report.replay_figure import replay_html

        args.html.parent.mkdir(parents=True, exist_ok=True)
        args.html.write_text(replay_html(result))
        if not args.json:
            print(f"wrote {args.html}")
    return OK


def _write_lengths(args: argparse.Namespace, log: RunLog, overrides: dict[str, object]) -> None:
    import yaml

    from rlsim.config import load_scenario
    from rlsim.replay.compare import usable_steps
    from rlsim.workload.logged_lengths import pooled_length_fields

    algorithm = load_scenario(args.scenario, overrides).algorithm
    steps = usable_steps(log)[0]
    fields = pooled_length_fields([s.metrics for s in steps], max_response_tokens=algorithm.max_response_tokens,
                                  max_prompt_tokens=algorithm.max_prompt_tokens,
                                  prompts_per_step=algorithm.prompts_per_step,
                                  samples_per_prompt=algorithm.samples_per_prompt)
    header = (f"# Lengths of {log.file}, steps {steps[0].step}-{steps[-1].step}: one lognormal each with their average "
              "logged statistics (rlsim replay --lengths-out).\n# Paste under `workload:` in a scenario.\n")
    args.lengths_out.parent.mkdir(parents=True, exist_ok=True)
    args.lengths_out.write_text(header + yaml.safe_dump(fields, sort_keys=False))
    if not args.json:
        print(f"wrote {args.lengths_out}")


def replay_text(result: Replay) -> str:
    """Per step, each timer's logged and simulated seconds and the error; then per timer over all steps."""
    from rlsim.report.replay_figure import step_ranges

    lines = [f"replay of {result.log} on {result.scenario}: {len(result.steps)} steps"]
    if result.missing:
        lines.append(f"missing from the log: steps {step_ranges(result.missing)} (the rest are compared)")
    if result.without_lengths:
        lines.append(f"left out, no response_length/mean or stage timer: steps {step_ranges(result.without_lengths)}")
    if result.side_steps:
        lines.append(f"validated or saved a checkpoint: steps {step_ranges(result.side_steps)} (step time compared "
                     "without timing_s/testing and timing_s/save_checkpoint)")
    names = [t.timer for t in result.timers]
    lines.append("")
    lines.append(f"{'step':>6}  " + "  ".join(f"{n:>26}" for n in names))
    lines.append(f"{'':>6}  " + "  ".join(f"{'logged → simulated   err':>26}" for _ in names))
    errors = [t.errors_pct() for t in result.timers]
    for i, step in enumerate(result.steps):
        cells = []
        for t, e in zip(result.timers, errors, strict=True):
            logged = t.logged[i]
            cells.append(f"{'—':>26}" if logged is None else
                         f"{logged:>8.2f} → {t.simulated[i]:>8.2f} {_pct(e[i]):>6}")
        lines.append(f"{step:>6}  " + "  ".join(cells))
    lines.append("")
    lines.append(f"{'timer':<20} {'rlsim stages':<20} {'logged s':>10} {'simulated s':>12} {'error':>8} "
                 f"{'mean |error| per step':>22}")
    for t in result.timers:
        logged, simulated = t.means()
        lines.append(f"{t.timer:<20} {' + '.join(t.stages):<20} {logged:>10.3f} {simulated:>12.3f} "
                     f"{_pct(t.error_pct()):>8} {_magnitude(t.mean_abs_error_pct()):>22}")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}%"


def _magnitude(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"
