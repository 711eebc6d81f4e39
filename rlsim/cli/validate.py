"""`rlsim validate`: run the validation cases, print simulated against published figures with their errors, and
write docs/validation.md with the table and a parity plot."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlsim.cli.exitcodes import OK
from rlsim.cli.run import parse_overrides

if TYPE_CHECKING:
    from rlsim.validation.run import CaseRun

# The page of a source checkout; an installed rlsim has none and writes a page only where --docs says.
_CHECKOUT_DOCS = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
DEFAULT_DOCS = _CHECKOUT_DOCS if _CHECKOUT_DOCS.is_file() else None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="compare simulated step and stage times with published real runs",
        description="Run the validation cases (scenarios/validation/cases.yaml), print each published figure, its "
        "simulated value and the error, the paired comparisons (winner and speed-up), and the median and worst "
        "|error|; write docs/validation.md and its parity plot (only when every case ran).")
    parser.add_argument("--case", dest="cases", action="append", metavar="NAME",
                        help="run only this case, or this group (e.g. V3); repeatable")
    parser.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    parser.add_argument("--cases-file", type=Path,
                        help="the manifest of cases (default: the shipped scenarios/validation/cases.yaml)")
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS,
                        help="the validation page to rewrite (default: docs/validation.md of a source checkout; "
                        "an installed rlsim writes none unless given)")
    parser.add_argument("--no-docs", action="store_true", help="do not write the validation page")
    parser.add_argument("--jobs", type=int, default=1, help="cases simulated in parallel (results do not change)")
    parser.add_argument("--set", dest="probe", action="append", default=[], metavar="PATH=VALUE",
                        help="probe an open assumption: override a field of every selected case on top of its own, "
                        "e.g. --set workload.response_tokens.scale=2 (repeatable; VALUE is YAML); the page is not "
                        "rewritten")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.validation.cases import DEFAULT_MANIFEST, load_manifest
    from rlsim.validation.docs import write_docs
    from rlsim.validation.run import run_validation

    probe = parse_overrides(args.probe)
    manifest = args.cases_file or DEFAULT_MANIFEST
    validation = run_validation(manifest, args.cases, max(1, args.jobs), on_case=_progress, probe=probe)
    written = []
    # The page documents the shipped assumptions, so a probe never rewrites it.
    if not args.cases and not probe and not args.no_docs and args.docs is not None:
        written = write_docs(validation, load_manifest(manifest), args.docs)
    if args.json:
        print(json.dumps({**validation.as_dict(), **({"probe": probe} if probe else {})}, indent=2))
    else:
        if probe:
            print("probe: " + ", ".join(f"{path}={value!r}" for path, value in probe.items())
                  + " on top of each case's own settings")
        print(validation.text())
        host = sum(validation.host_seconds.values())
        print(f"{len(validation.host_seconds)} cases in {host:.0f} s of simulation"
              + (f"; wrote {', '.join(str(p) for p in written)}" if written else ""))
    return OK


def _progress(run: CaseRun) -> None:
    # On stderr, so `--json` output stays a single document.
    print(f"  {run.case}: {run.host_seconds:.1f} s", file=sys.stderr, flush=True)
