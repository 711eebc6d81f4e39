"""`rlsim example [NAME]`: list the example scenarios and sweeps that come with rlsim, or write one to a file."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.cli.exitcodes import OK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("example", help="list the example scenarios, or write one to start from",
                                   description="Without NAME, list the example scenarios and sweeps that come with "
                                   "rlsim, each with its one-line description. With NAME, write that example to "
                                   "./NAME.yaml (or --out), the traces and base scenarios it reads pointed at the "
                                   "installed copies so it runs from anywhere.")
    parser.add_argument("name", nargs="?", help="example to write, e.g. quickstart or sweeps/quickstart-200")
    parser.add_argument("--out", type=Path, help="file to write (default: ./NAME.yaml, the last part of NAME)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.errors import Problem, ScenarioError
    from rlsim.examples import example, examples

    if args.name is None:
        shown = examples()
        width = max(len(e.name) for e in shown)
        print("examples (`rlsim example NAME` writes one to ./NAME.yaml):")
        for shipped in shown:
            print(f"  {shipped.name:<{width}}  {shipped.description()}")
        return OK
    chosen = example(args.name)
    out: Path = args.out or Path(Path(chosen.name).name + ".yaml")
    if out.exists() and not args.force:
        raise ScenarioError(Problem("the file exists; rlsim example does not overwrite it", file=str(out),
                                    valid="another --out, or --force to overwrite"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(chosen.portable_text(), encoding="utf-8")
    then = f"rlsim sweep {out} --out {out.stem}" if chosen.is_sweep else f"rlsim check {out}, then rlsim run {out}"
    print(f"wrote {out}: {then}")
    return OK
