"""The README and the docs: every command is in the README's table, every docs page is reachable from the README, and
every repository path they cite exists (a renamed module or a moved scenario leaves no dead reference behind)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from rlsim.cli import build_parser

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = sorted([*ROOT.glob("docs/*.md"), *ROOT.glob("docs/background/*.md")])
TOP_FOLDERS = ("rlsim", "docs", "scenarios", "tests", "calibration", "benchmarks", "traces", "hardware_profiles",
               "notebooks", ".ci")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
# A backticked path into the repository, e.g. `rlsim/cli/plan.py` or `scenarios/quickstart.yaml`; one with a
# placeholder (<name>, *, …, {…}) names a pattern, not a file.
CITED = re.compile(r"`((?:" + "|".join(re.escape(f) for f in TOP_FOLDERS) + r")/[^`\s]*)`")
PLACEHOLDER = re.compile(r"[<>*…{}$]|\bNAME\b|\bX\b")


def cited_paths(page: Path) -> list[tuple[str, Path]]:
    """(as written, where it points) for each linked or backticked repository path of a page."""
    text = page.read_text(encoding="utf-8")
    found = []
    for target in LINK.findall(text):
        if not re.match(r"[a-z]+:", target):
            found.append((target, (page.parent / target).resolve()))
    for path in CITED.findall(text):
        path = path.split(":")[0].rstrip(".,;")  # `rlsim/foo.py:12`, a path ending a sentence
        if not PLACEHOLDER.search(path):
            found.append((path, ROOT / path))
    return found


def test_every_docs_page_is_linked_from_the_readme():
    linked = {target.resolve() for _, target in cited_paths(README)}
    assert PAGES and [p.relative_to(ROOT).as_posix() for p in PAGES if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_path_exists(page):
    missing = sorted({written for written, target in cited_paths(page) if not target.exists()})
    assert missing == []


def test_the_commands_table_lists_every_command():
    commands = README.read_text(encoding="utf-8").split("## Commands", 1)[1].split("\n## ", 1)[0]
    [subparsers] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert [name for name in subparsers.choices if f"`rlsim {name}" not in commands] == []
