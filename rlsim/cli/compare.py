"""`rlsim compare RUN_DIR RUN_DIR …`: the runs side by side, differences that matter first, as text and HTML."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.cli.exitcodes import OK
from rlsim.cli.file_names import bounded_name
from rlsim.errors import Problem, ScenarioError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="compare run folders side by side (text and HTML)",
                                   description="Read the metrics.json of each run folder written by `rlsim run` and "
                                   "print the runs side by side, the figures that differ most from the first run "
                                   "first; write the same as a self-contained HTML page.")
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders (the first is the baseline)")
    parser.add_argument("--out", type=Path, help="HTML file to write (default: compare-<first>-vs-<second>….html beside "
                        "the first run folder)")
    parser.set_defaults(handler=compare)


def run_names(folders: list[Path]) -> list[str]:
    """Folder names, or whole paths when two folders share a name."""
    names = [folder.name or str(folder) for folder in folders]
    return names if len(set(names)) == len(names) else [str(folder) for folder in folders]


def compare(args: argparse.Namespace) -> int:
    from rlsim.report.compare import NamedMetrics, compare_html, compare_text, read_run_metrics

    if len(args.runs) < 2:
        raise ScenarioError(Problem("compare needs at least two run folders", file="rlsim compare"))
    runs = [NamedMetrics(name, read_run_metrics(folder)) for name, folder in zip(run_names(args.runs), args.runs, strict=True)]
    out = args.out or default_compare_path(args.runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(compare_html(runs))
    print(compare_text(runs))
    print(f"wrote {out}")
    return OK


def default_compare_path(folders: list[Path]) -> Path:
    """Beside the first run folder (where its runs live, not wherever the command happens to run), named after the
    runs; a long name ends in a digest of them."""
    name = bounded_name("compare-" + "-vs-".join(folder.resolve().name for folder in folders))
    return folders[0].resolve().parent / f"{name}.html"
