"""`rlsim calibrate fit RAW --base GPU --out PROFILE.yaml` and `rlsim calibrate show PROFILE`: turn the harness's
raw measurements into a hardware profile, and look at how well its curves fit (docs/calibration.md)."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.calibrate.fit import Fit, fit_raw
from rlsim.calibrate.profile import write_profile
from rlsim.calibrate.raw import load_raw
from rlsim.calibrate.show import curve_table, profile_curves, write_figure
from rlsim.cli.exitcodes import OK
from rlsim.costs.compute import GPURates
from rlsim.errors import Problem, ScenarioError, UnknownName
from rlsim.hardware import HardwareCatalog


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("calibrate", help="fit microbenchmark measurements into a hardware profile",
                                   description="Fit the raw JSON written by calibration/microbench.py into a hardware "
                                   "profile the cost models use in place of the spec-sheet defaults, and show how "
                                   "well a calibrated profile's curves fit its measurements.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    fit = actions.add_parser("fit", help="fit a raw measurement file into a calibrated profile",
                             description="Fit efficiency-vs-size curves (GEMM per dtype, prefill attention), "
                             "bandwidth curves (HBM, decode attention, host copies) and alpha-beta terms per "
                             "collective and group size; print each fit's held-out error; write the profile.")
    fit.add_argument("raw", type=Path, help="raw JSON from calibration/microbench.py (or a published-data YAML)")
    fit.add_argument("--base", required=True, help="the profile to start from (spec sheet, node, links), e.g. h100-sxm")
    fit.add_argument("--out", required=True, type=Path,
                     help="profile to write, e.g. hardware_profiles/h100-lab.yaml (its file name is the profile name)")
    fit.add_argument("--profile-dir", action="append", default=[], type=Path, metavar="DIR",
                     help="extra profile directory holding the base (repeatable)")
    fit.set_defaults(handler=fit_command)
    show = actions.add_parser("show", help="measured vs fitted curves of a calibrated profile",
                              description="Print every fitted curve of a calibrated profile with its held-out error and "
                              "write an HTML figure of the measured points against the fitted curves.")
    show.add_argument("profile", help="a profile YAML file, or the name of a shipped profile")
    show.add_argument("--out", type=Path, help="HTML figure to write (default: <profile name>-calibration.html)")
    show.set_defaults(handler=show_command)


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
    # The written files must load: a profile that fails here would fail in every scenario that names it.
    HardwareCatalog.load([*args.profile_dir, args.out.parent]).gpu(args.out.stem)
    print(fit_table(fits.all()))
    for reason in fits.unfitted:
        print(f"not fitted (left out of the profile): {reason}")
    if fits.launch_s is not None:
        print(f"kernel launch (eager, median): {fits.launch_s * 1e6:.2f} us")
    print(f"wrote {written.gpu_file}" + "".join(f", {p}" for p in written.link_files))
    print(f"use it with `cluster.profile_dirs: [{args.out.parent}]` and `gpu: {args.out.stem}`")
    return OK


def show_command(args: argparse.Namespace) -> int:
    path = Path(args.profile)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ScenarioError(Problem("no such profile file", file=str(path)))
        catalog, name = HardwareCatalog.load([path.parent]), path.stem
    else:
        catalog, name = HardwareCatalog.load(), args.profile
    try:
        gpu = catalog.gpu(name)
    except UnknownName as err:
        raise ScenarioError(Problem(f"no GPU profile named {name!r}", file=str(args.profile), value=name,
                                    valid=", ".join(err.known), suggestion=err.suggestion)) from None
    curves = profile_curves(catalog, gpu.name)
    if not curves:
        raise ScenarioError(Problem(f"profile {gpu.name!r} has no calibration", file=str(args.profile),
                                    valid="a profile written by `rlsim calibrate fit`, e.g. h100-sxm-published"))
    if gpu.calibration is not None:
        print(gpu.calibration.note)
    print(curve_table(curves))
    out = args.out or Path(f"{gpu.name}-calibration.html")
    write_figure(curves, f"{gpu.display_name}: measured vs fitted", out)
    print(f"wrote {out}")
    return OK
