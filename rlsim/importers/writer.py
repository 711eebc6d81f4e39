"""Write a Draft as a scenario file: a header naming the sources and every key left unmapped or ignored, then each
field with a comment saying where its value came from. The file appears only once `rlsim check`'s loader accepts it
(written to a temporary file beside it, loaded, then renamed)."""
from __future__ import annotations

import os
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlsim.config import load_scenario
from rlsim.config.schema import Scenario
from rlsim.errors import Problem, ScenarioError
from rlsim.importers.mapping import Draft
from rlsim.yamlsource import flow_text, parse_path

# The order of a scenario's sections in the files rlsim ships.
SECTION_ORDER = ("name", "description", "seed", "cluster", "model", "algorithm", "workload", "placement", "schedule",
                 "framework", "run")


def render(draft: Draft, title: str) -> str:
    lines = [f"# {title}"]
    for heading, items in (("Assumptions (not in the framework's files)", draft.notes),
                           ("Not mapped (rlsim has no field for these, or the importer does not read them)",
                            draft.unmapped),
                           ("Ignored, no effect on time", draft.ignored)):
        if items:
            lines.append(f"# {heading}:")
            for item in items:
                lines.extend(textwrap.wrap(item, 116, initial_indent="#   * ", subsequent_indent="#     "))
    tree: dict[str, Any] = {}
    for path, (value, origin) in draft.fields.items():
        node: Any = tree
        parts = parse_path(path)
        for part, after in zip(parts[:-1], parts[1:], strict=True):
            if isinstance(node, list):
                while len(node) <= int(part):
                    node.append({})
                node = node[int(part)]
            else:
                node = node.setdefault(part, [] if isinstance(after, int) else {})
        node[parts[-1]] = (value, origin)
    order = {key: i for i, key in enumerate(SECTION_ORDER)}
    _emit(dict(sorted(tree.items(), key=lambda item: order.get(item[0], len(order)))), 0, lines)
    return "\n".join(lines) + "\n"


def _emit(node: dict[str, Any], indent: int, lines: list[str], first_prefix: str | None = None) -> None:
    for i, (key, child) in enumerate(node.items()):
        pad = first_prefix if (first_prefix is not None and i == 0) else " " * indent
        if isinstance(child, tuple):
            value, origin = child
            lines.append(f"{pad}{key}: {flow_text(value)}  # {origin}")
        elif isinstance(child, list):
            lines.append(f"{pad}{key}:")
            for item in child:
                _emit(item, indent + 4, lines, first_prefix=" " * (indent + 2) + "- ")
        else:
            lines.append(f"{pad}{key}:")
            _emit(child, indent + 2, lines)


def write_checked(text: str, out: Path) -> Scenario:
    """Write `text` to `out` only if it loads as a valid scenario; otherwise leave nothing and raise ScenarioError."""
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.importing")
    temporary.write_text(text, encoding="utf-8")
    try:
        scenario = load_scenario(temporary)
    except ScenarioError as err:
        temporary.unlink()
        head = Problem(f"the imported scenario does not pass rlsim check, so {out} was not written")
        raise ScenarioError([head, *(replace(p, file=str(out)) if p.file == str(temporary) else p
                                     for p in err.problems)]) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, out)
    return scenario
