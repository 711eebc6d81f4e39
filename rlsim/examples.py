"""The example scenarios and sweeps that come with rlsim (scenarios/ of a checkout, rlsim/_shipped/scenarios of a
wheel): their names, one-line descriptions, and their text made to run from wherever it is written."""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from rlsim.errors import Problem, ScenarioError
from rlsim.loading import closest
from rlsim.shipped import shipped

EXAMPLES = shipped("scenarios", "scenarios")
FOLDERS = ("", "sweeps")  # scenarios/validation holds `rlsim validate`'s cases, not examples
# A file a scenario or sweep reads, named relative to the file: a trace (`path:`) or a sweep's base scenario (`base:`).
_RELATIVE_FILE = re.compile(r"(?P<key>\b(?:path|base):[ \t]*)(?P<path>[^\s,}\]#'\"]+)")
_SENTENCE_END = re.compile(r"(?<=[.?!])\s")
DESCRIPTION_WIDTH = 100  # with a name column, a listing line fits a wide terminal


@dataclass(frozen=True)
class Example:
    name: str  # the path under scenarios/ without .yaml, e.g. quickstart or sweeps/quickstart-200
    path: Path

    @property
    def is_sweep(self) -> bool:
        data = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        return isinstance(data, dict) and "base" in data

    def description(self) -> str:
        """Its `description`, else the first sentence of its leading comment."""
        text = self.path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
        if isinstance(data, dict) and data.get("description"):
            return " ".join(str(data["description"]).split())
        comment = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            comment.append(line.lstrip("#").strip())
        first = _SENTENCE_END.split(" ".join(comment), maxsplit=1)[0]
        return textwrap.shorten(first, width=DESCRIPTION_WIDTH, placeholder=" …")

    def portable_text(self) -> str:
        """The file's text with every relative file it reads (traces, a sweep's base) made absolute, so a copy written
        anywhere runs; comments and layout stay as they are."""
        folder = self.path.parent

        def absolute(match: re.Match[str]) -> str:
            target = folder / match["path"]
            if Path(match["path"]).is_absolute() or not target.exists():
                return match[0]
            return match["key"] + target.resolve().as_posix()

        return _RELATIVE_FILE.sub(absolute, self.path.read_text(encoding="utf-8"))


def examples() -> list[Example]:
    """Every example, the scenarios first, then the sweeps, each by name."""
    found = []
    for folder in FOLDERS:
        for path in sorted((EXAMPLES / folder).glob("*.yaml")):
            found.append(Example(f"{folder}/{path.stem}" if folder else path.stem, path))
    return found


def example(name: str) -> Example:
    known = {e.name: e for e in examples()}
    wanted = name.removesuffix(".yaml")
    if wanted in known:
        return known[wanted]
    raise ScenarioError(Problem(f"no example named {name!r}", file="rlsim example", value=name,
                                valid="one of `rlsim example`'s list", suggestion=closest(wanted, known)))
