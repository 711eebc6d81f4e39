"""`rlsim calibrate show PROFILE`: a calibrated profile's fitted curves with their held-out errors, and an HTML figure
of the measured points against them."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.calibrate.show import curve_table, profile_curves
from rlsim.cli.exitcodes import OK
from rlsim.errors import Problem, ScenarioError, UnknownName
from rlsim.hardware import HardwareCatalog
from rlsim.report.calibration_figure import write_figure


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
