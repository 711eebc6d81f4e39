"""`rlsim fit RUN_LOG --scenario S [--out run-fit.yaml] [--held-out N]`: fit a few framework parameters to a run's
logged stage times and write them as an overlay that `rlsim run` and `rlsim plan` read with `--calibration`.

Fitted, each only when the log has the timers it moves: framework.training_kernel_efficiency (megatron_kernel_efficiency
on the megatron backend) to the training passes, framework.engine_step_cpu_s to generation, and
framework.trainer_step_overhead_s to verl's adv timer. The last N steps are held out of the fit and their error is
reported before and after it. See docs/replay.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.cli.exitcodes import OK
from rlsim.cli.lazy import lazy_handler
from rlsim.cli.overrides import add_set_argument
from rlsim.cli.run_log_args import add_run_log_arguments, read_log_window


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fit", help="fit framework parameters to a logged run's stage times, as an "
                                   "overlay for --calibration", description=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_log_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("run-fit.yaml"),
                        help="overlay YAML to write (default: run-fit.yaml)")
    parser.add_argument("--held-out", type=int, default=None, dest="held_out",
                        help="the last N steps are not fitted, only checked (default: a fifth of the steps)")
    add_set_argument(parser)
    parser.set_defaults(handler=lazy_handler("rlsim.cli.fit", "run_fit"))


def run_fit(args: argparse.Namespace) -> int:
    from rlsim.cli.overrides import parse_overrides
    from rlsim.replay.fit import fit

    log = read_log_window(args)
    result = fit(args.scenario, log, held_out=args.held_out,
                 overrides=parse_overrides(args.overrides))
    for v in result.values:
        spread = f" ± {v.uncertainty:.3g}" if v.uncertainty is not None else " (uncertainty unknown: too few steps)"
        print(f"{v.field:<28} {v.value:.4g}{spread}   (scenario: {v.start:.4g}; from {', '.join(v.timers)})")
    print(f"fitted steps ({len(result.fitted_steps)}): mean |error| {result.fitted_error_before_pct:.1f} % -> "
          f"{result.fitted_error_after_pct:.1f} %")
    if result.held_out_error_before_pct is not None and result.held_out_error_after_pct is not None:
        print(f"held-out steps ({len(result.held_out_steps)}): mean |error| "
              f"{result.held_out_error_before_pct:.1f} % -> {result.held_out_error_after_pct:.1f} %")
    else:
        print("no steps held out")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.overlay_yaml())
    print(f"wrote {args.out} (use: rlsim run {args.scenario} --calibration {args.out})")
    return OK
