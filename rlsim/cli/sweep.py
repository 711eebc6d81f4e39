"""`rlsim sweep SWEEP.yaml --out DIR`: run every point of a sweep, locally or on Ray, resumably; table and report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsim.cli.exitcodes import OK
from rlsim.cli.overrides import add_set_argument, parse_overrides


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="run a sweep of scenarios in parallel (local cores or Ray), resumably",
        description="Expand a sweep file (a base scenario with grid, zip, cases, derived values and constraints) into "
        "points and simulate each one. Every point writes its run folder under DIR/points/<id>/ (the id is a hash of "
        "its resolved scenario); DIR/results.csv and results.parquet hold one row per point, DIR/report.html the best "
        "points, the Pareto front and per-axis effects. A point that does not fit in memory is recorded as "
        "infeasible, one that fails with its error; the sweep goes on. --set changes the base scenario of every point, "
        "after the file's own `set` and before the axes; a path the sweep varies cannot be set.")
    parser.add_argument("sweep", type=Path, help="sweep YAML file (docs/sweeps.md)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--workers", type=int, default=1, help="points run at once (default: %(default)s)")
    # No argparse choices: the executors load Ray's glue and the simulator; run_sweep names the valid ones.
    parser.add_argument("--executor", default="local",
                        help="local: a process pool on this machine; ray: a Ray cluster (default: %(default)s)")
    parser.add_argument("--address", help="Ray cluster address for --executor ray (default: RAY_ADDRESS, or start a "
                        "local cluster of --workers CPUs)")
    parser.add_argument("--resume", action="store_true", help="continue a sweep in DIR: skip the points it finished")
    parser.add_argument("--full-runs", action="store_true",
                        help="also write each point's report.html and trace.json (≈5 MB and ≈1 s per point)")
    add_set_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.sweep import load_sweep, run_sweep

    overrides = parse_overrides(args.overrides)
    spec = load_sweep(args.sweep)
    if overrides:
        spec = spec.with_overrides(overrides)
    result = run_sweep(spec, args.out, workers=args.workers, executor=args.executor, resume=args.resume,
                       address=args.address, full_run_folders=args.full_runs, progress=sys.stderr)
    expansion = result.expansion
    print(f"sweep {expansion.spec.name}: {len(result.rows)} points ({result.count('ok')} ok, "
          f"{result.count('infeasible')} infeasible, {result.count('failed')} failed); ran {result.ran} now, "
          f"{len(result.rows) - result.ran} were already done; {expansion.skipped} skipped by constraints, "
          f"{expansion.duplicates} duplicates")
    fastest = sorted((r for r in result.rows if r["status"] == "ok"), key=lambda r: (r["step_time_s"], r["point"]))[:5]
    if fastest:
        axes = list(expansion.spec.axis_paths)
        print("fastest points:")
        print(f"  {'point':<18}{'step s':>10}{'GPUs':>6}{'tokens/s/GPU':>14}  " + "  ".join(axes))
        for row in fastest:
            print(f"  {row['point']:<18}{row['step_time_s']:>10.2f}{row['gpus']:>6}{row['tokens_per_s_per_gpu']:>14,.0f}"
                  "  " + "  ".join(f"{row[a]}" for a in axes))
    for row in result.rows:
        if row["status"] == "failed":
            print(f"failed: {row['point']}: {row['error']}", file=sys.stderr)
    print(f"wrote {args.out}/: results.csv, results.parquet, report.html, points/<id>/ (rlsim compare "
          f"{args.out}/points/A {args.out}/points/B)")
    return OK
