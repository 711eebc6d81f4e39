"""`rlsim validate`: run the validation cases, print simulated against published figures with their errors, and
write docs/validation.md with the table and a parity plot."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlsim.cli.exitcodes import BAD_INPUT, OK
from rlsim.cli.overrides import add_set_argument, parse_overrides

# The page of a source checkout; an installed rlsim has none and writes a page only where --docs says.
_CHECKOUT_DOCS = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
DEFAULT_DOCS = _CHECKOUT_DOCS if _CHECKOUT_DOCS.is_file() else None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="compare simulated step and stage times with published real runs",
        description="Run the validation cases (scenarios/validation/cases.yaml), print each published figure, its "
        "simulated value and the error, the paired comparisons (winner and speed-up), and the median and worst "
        "|error|; write docs/validation.md and its parity plot (only when every case ran). --set probes an open "
        "assumption: it changes every selected case on top of the case's own settings, e.g. "
        "--set workload.response_tokens.scale=2, and then the page is not rewritten.")
    parser.add_argument("--case", dest="cases", action="append", metavar="NAME",
                        help="run only this case, or this group (e.g. V3; any letter case); repeatable")
    parser.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    parser.add_argument("--cases-file", type=Path,
                        help="the manifest of cases (default: the shipped scenarios/validation/cases.yaml)")
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS,
                        help="the validation page to rewrite (default: docs/validation.md of a source checkout; "
                        "an installed rlsim writes none unless given)")
    parser.add_argument("--no-docs", action="store_true", help="do not write the validation page")
    parser.add_argument("--jobs", type=int, default=None,
                        help="cases simulated in parallel (default: the cores not already busy; results do not change)")
    parser.add_argument("--sensitivity", action="store_true",
                        help="rerun each case once per open assumption (response lengths ×1.25, reward cost ×2, engine "
                        "step CPU ×2, every host CPU time ×1.5) and show how much each moves each figure; writes no page")
    add_set_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.cli.cores import free_cores
    from rlsim.progress import Progress
    from rlsim.validation.cases import DEFAULT_MANIFEST, load_manifest
    from rlsim.validation.docs import write_docs, write_readme_accuracy
    from rlsim.validation.run import run_validation, select_cases
    from rlsim.yamlsource import flow_text

    probe = parse_overrides(args.overrides)
    manifest = args.cases_file or DEFAULT_MANIFEST
    if args.jobs is None:
        args.jobs = free_cores()
    if args.sensitivity:
        return _sensitivity(manifest, args)
    total = len(select_cases(load_manifest(manifest), args.cases))
    # On stderr, so `--json` output stays a single document.
    with Progress(total, "cases", sys.stderr) as bar:
        validation = run_validation(manifest, args.cases, max(1, args.jobs),
                                    on_case=lambda case: bar.advance(), probe=probe)
    written = []
    # The page documents the shipped assumptions, so a probe never rewrites it.
    if not args.cases and not probe and not args.no_docs and args.docs is not None:
        written = write_docs(validation, load_manifest(manifest), args.docs)
        readme = args.docs.resolve().parent.parent / "README.md"
        # Only the checkout's own README, whose docs/ the page is in: a page written elsewhere leaves it alone.
        if args.docs.resolve() == _CHECKOUT_DOCS and readme.is_file() and write_readme_accuracy(validation, readme):
            written.append(readme)
    if args.json:
        print(json.dumps({**validation.as_dict(), **({"probe": probe} if probe else {})}, indent=2))
    else:
        if probe:
            print("probe: " + ", ".join(f"{path}={flow_text(value)}" for path, value in probe.items())
                  + " on top of each case's own settings")
        print(validation.text())
        host = sum(validation.host_seconds.values())
        print(f"{len(validation.host_seconds)} cases in {host:.0f} s of simulation"
              + (f"; wrote {', '.join(str(p) for p in written)}" if written else ""))
    return OK


def _sensitivity(manifest: Path, args: argparse.Namespace) -> int:
    from rlsim.progress import Progress
    from rlsim.validation.sensitivity import plan_sensitivity, run_sensitivity

    if args.overrides:
        print("rlsim validate: --sensitivity makes its own changes; run a --set probe without it", file=sys.stderr)
        return BAD_INPUT
    plan = plan_sensitivity(manifest, args.cases)
    with Progress(len(plan.runs), "runs", sys.stderr) as bar:
        sensitivity = run_sensitivity(plan, max(1, args.jobs), on_run=bar.advance)
    print(json.dumps(sensitivity.as_dict(), indent=2) if args.json else sensitivity.text())
    return OK
