"""`rlsim calibrate fit RAW --base GPU --out PROFILE.yaml`: fit the harness's raw measurements into a hardware
profile, print each curve's held-out error, and write the profile."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.calibrate.fit import Fit, fit_raw
from rlsim.calibrate.profile import write_profile
from rlsim.calibrate.raw import load_raw
from rlsim.cli.exitcodes import OK
from rlsim.costs.compute import GPURates
from rlsim.errors import Problem, ScenarioError, UnknownName
from rlsim.hardware import HardwareCatalog


def _rate(fit: Fit) -> str:
    if fit.unit == "FLOP":
        return f"{fit.rate / 1e12:.4g} TFLOP/s"
    return f"{fit.rate / 1e9:.4g} GB/s"


def fit_table(fits: list[Fit]) -> str:
    lines = [f"{'curve':<36}{'points':>8}{'fixed us':>11}{'rate':>18}{'held-out MAPE':>15}{'in-sample':>11}"]
    for fit in fits:
        held = "n/a" if fit.held_out_mape is None else f"{100 * fit.held_out_mape:.1f}%"
        points = f"{len(fit.samples)}" + (f"+{fit.excluded}" if fit.excluded else "")
        fixed = f"{fit.fixed_s * 1e6:.2f}" + ("*" if fit.fixed_from_prior else "")
        lines.append(f"{fit.name:<36}{points:>8}{fixed:>11}{_rate(fit):>18}{held:>15}{100 * fit.in_sample_mape:>10.1f}%")
    notes = [f"{fit.name}: between measured sizes rlsim interpolates the points; held-out MAPE of that "
             f"{100 * fit.table_held_out_mape:.1f}%" for fit in fits if fit.table_held_out_mape is not None]
    if any(f.excluded for f in fits):
        notes.append("+N: points left out: memory-bound GEMMs (the HBM curve prices them), or faster than the fixed fill")
    if any(f.fixed_from_prior for f in fits):
        notes.append("*: fixed term held at the cost model's default (GEMM/attention fill, or fewer than 3 distinct sizes)")
    return "\n".join(lines + notes)


def fit_command(args: argparse.Namespace) -> int:
    raw = load_raw(args.raw)
    catalog = HardwareCatalog.load(args.profile_dir)
    try:
        base = catalog.gpu(args.base)
    except UnknownName as err:
        raise ScenarioError(Problem(f"no GPU profile named {args.base!r}", file="--base", value=args.base,
                                    valid=", ".join(err.known), suggestion=err.suggestion)) from None
    fits = fit_raw(raw, str(args.raw), GPURates.from_profile(base))
    if not fits.all():
        reasons = "; ".join(fits.unfitted) or "it holds only launch timings"
        raise ScenarioError(Problem(f"no curve could be fitted: {reasons}", file=str(args.raw),
                                    valid="a raw file from calibration/microbench.py with sizes spanning a factor of 10"))
    written = write_profile(args.out, base.name, fits, raw, str(args.raw), catalog)
    # The written files must load: a profile that fails here would fail in every scenario that names it. One that
    # does not (a fitted rate past any real GPU's) is removed again, and the measurements are blamed.
    try:
        HardwareCatalog.load([*args.profile_dir, args.out.parent]).gpu(args.out.stem)
    except ScenarioError as err:
        for path in (written.gpu_file, *written.link_files):
            Path(path).unlink(missing_ok=True)
        raise ScenarioError([Problem("the profile fitted to these measurements is not one of a real GPU, so none was "
                                     "written", file=str(args.raw), valid="measurements of one GPU by "
                                     "calibration/microbench.py"), *err.problems]) from None
    print(fit_table(fits.all()))
    for reason in fits.unfitted:
        print(f"not fitted (left out of the profile): {reason}")
    if fits.launch_s is not None:
        print(f"kernel launch (eager, median): {fits.launch_s * 1e6:.2f} us")
    print(f"wrote {written.gpu_file}" + "".join(f", {p}" for p in written.link_files))
    print(f"use it with `cluster.profile_dirs: [{args.out.parent}]` and `gpu: {args.out.stem}`")
    return OK
