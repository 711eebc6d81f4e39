"""`rlsim import FRAMEWORK ...`: write the scenario and list what was not mapped."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsim.cli.exitcodes import OK
from rlsim.importers.run import import_nemo_rl, import_verl


def run_import(args: argparse.Namespace) -> int:
    out = args.out or Path(f"{args.paths[0].stem}.rlsim.yaml")
    if args.framework == "verl":
        imported = import_verl(args.paths, args.gpu, out)
    else:
        imported = import_nemo_rl(args.paths[0], args.gpu, out)
    draft = imported.draft
    if draft.unmapped:
        print(f"not mapped ({len(draft.unmapped)}): " + ", ".join(draft.unmapped), file=sys.stderr)
    if draft.ignored:
        print(f"ignored, no effect on time ({len(draft.ignored)}): " + ", ".join(draft.ignored), file=sys.stderr)
    for note in draft.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {imported.out}")
    return OK
