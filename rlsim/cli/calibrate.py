"""`rlsim calibrate fit RAW --base GPU --out PROFILE.yaml` and `rlsim calibrate show PROFILE`: turn the harness's
raw measurements into a hardware profile, and look at how well its curves fit (docs/calibration.md)."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.cli.lazy import lazy_handler


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
    fit.set_defaults(handler=lazy_handler("rlsim.cli.calibrate_fit", "fit_command"))
    show = actions.add_parser("show", help="measured vs fitted curves of a calibrated profile",
                              description="Print every fitted curve of a calibrated profile with its held-out error and "
                              "write an HTML figure of the measured points against the fitted curves.")
    show.add_argument("profile", help="a profile YAML file, or the name of a shipped profile")
    show.add_argument("--out", type=Path, help="HTML figure to write (default: <profile name>-calibration.html)")
    show.set_defaults(handler=lazy_handler("rlsim.cli.calibrate_show", "show_command"))
