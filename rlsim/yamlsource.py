"""Read YAML keeping the line of every value, so errors can point at the line a user must edit."""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlsim.errors import Problem, ScenarioError

PathKey = tuple[str | int, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"
# Bounds past which an input is refused rather than read: no scenario, profile or trace file needs more, and past them a
# crafted file (aliases of aliases, an endless stream) would exhaust memory or time before any check could run.
MAX_INPUT_BYTES = 64 * 2**20
MAX_YAML_VALUES = 1_000_000
MAX_YAML_DEPTH = 64
# libyaml's parser when PyYAML was built with it (ten times faster, same nodes and line marks), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TOO_DEEP = f"nested too deeply to parse (a scenario nests at most {MAX_YAML_DEPTH} levels)"


# Scalars the scenario format accepts in place of a mapping, and the key each stands for (`model: Qwen3-8B` is
# `model: {name: Qwen3-8B}`, config.schema.ModelConfig), so an override can set a field beside it.
SCALAR_SHORTHANDS: dict[PathKey, str] = {("model",): "name"}


@dataclass(frozen=True)
class YamlDocument:
    """Parsed YAML plus a map from field path to the 1-based line where that field is written."""

    data: Any
    file: str
    lines: dict[PathKey, int]
    overrides: dict[PathKey, str] = field(default_factory=dict)  # path -> the `--set path=value` text that wrote it

    def line_of(self, path: PathKey) -> int | None:
        """Line of the deepest written ancestor of `path` (a missing field is reported at its parent)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def problem(self, path: PathKey, message: str, **details: Any) -> Problem:
        for end in range(len(path), 0, -1):
            if tuple(path[:end]) in self.overrides:
                # The value came from the command line, not the file: point there.
                return Problem(message=message, path=dotted(path), file=f"--set {self.overrides[tuple(path[:end])]}",
                               **details)
        return Problem(message=message, path=dotted(path), file=self.file, line=self.line_of(path), **details)

    def with_overrides(self, assignments: dict[str, Any]) -> YamlDocument:
        """A copy with dotted-path assignments applied (`placement.rollout.gpus` -> 48, `cluster.pools[0].nodes` -> 2)."""
        data = copy.deepcopy(self.data)
        overrides = dict(self.overrides)
        for text_path, value in assignments.items():
            path = parse_path(text_path)
            node = data
            for i, part in enumerate(path[:-1]):
                missing = (isinstance(node, dict) and part not in node) or (
                    isinstance(node, list) and not (isinstance(part, int) and -len(node) <= part < len(node)))
                if missing or not isinstance(node, (dict, list)):
                    if isinstance(node, dict) and isinstance(part, str):
                        node[part] = {} if isinstance(path[i + 1], str) else []
                    else:
                        raise ScenarioError(Problem(f"cannot set {text_path}: {dotted(path[:i + 1])} is not a "
                                                    "mapping or list entry in the scenario", file=f"--set {text_path}"))
                if path[:i + 1] in SCALAR_SHORTHANDS and not isinstance(node[part], (dict, list)):
                    # `model: Qwen3-8B` then `--set model.dtype=fp8`: the shorthand becomes its full form first.
                    node[part] = {SCALAR_SHORTHANDS[path[:i + 1]]: node[part]}
                node = node[part]
            if isinstance(node, dict) and isinstance(path[-1], str):
                node[path[-1]] = value
            elif isinstance(node, list) and isinstance(path[-1], int) and -len(node) <= path[-1] < len(node):
                node[path[-1]] = value
            else:
                raise ScenarioError(Problem(f"cannot set {text_path}: its parent is not a mapping or the index is out "
                                            "of range", file=f"--set {text_path}"))
            overrides[path] = f"{text_path}={flow_text(value)}"
        return YamlDocument(data=data, file=self.file, lines=self.lines, overrides=overrides)


def flow_text(value: Any) -> str:
    """`value` as YAML on one line, the way it would be typed after `--set path=` (not Python's repr)."""
    return yaml.safe_dump(value, default_flow_style=True, width=float("inf")).removesuffix("\n...\n").strip()


def dotted(path: PathKey) -> str:
    """("cluster", "pools", 0, "gpu") -> "cluster.pools[0].gpu"."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")


def parse_path(text: str) -> PathKey:
    """"cluster.pools[0].gpu" -> ("cluster", "pools", 0, "gpu")."""
    parts: list[str | int] = []
    for name, index in _PATH_PART.findall(text):
        parts.append(int(index) if index else name)
    if not parts or "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".") != text.strip():
        raise ScenarioError(Problem(f"not a field path: {text!r} (expected e.g. placement.rollout.gpus or "
                                    "cluster.pools[0].nodes)", file=f"--set {text}"))
    return tuple(parts)


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse one YAML document. Syntax errors, duplicate keys and empty input raise ScenarioError."""
    loader = None
    try:
        loader = _LOADER(text)
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError(Problem("the file is empty (expected a YAML mapping)", file=file, line=1))
        lines: dict[PathKey, int] = {}
        _record_lines(node, lines, file)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        if exc.problem is not None and "maximum nesting depth" in exc.problem:
            # LibYAML's own bound (the PyYAML 6.0.4 wheels bundle a LibYAML that has one): the same refusal as the recursion
            # below, whichever of the two a machine's PyYAML hits first.
            raise ScenarioError(Problem(_TOO_DEEP, file=file, line=_error_line(exc))) from None
        raise ScenarioError(Problem(f"YAML syntax error: {_describe(exc)}", file=file, line=_error_line(exc))) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ScenarioError(Problem(f"not valid YAML text: character {exc.character!r} is not allowed",
                                    file=file, line=line)) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(Problem(f"YAML error: {exc}", file=file)) from None
    except RecursionError:
        # The parser itself recurses per level of nesting, before the walk above can bound it.
        raise ScenarioError(Problem(_TOO_DEEP, file=file)) from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(data=data, file=file, lines=lines)


def _error_line(exc: yaml.MarkedYAMLError) -> int | None:
    # The context mark is where the broken construct began (an unclosed bracket, a key missing its colon), which is
    # the line to edit; the problem mark is where the parser gave up, often the next line.
    mark = exc.context_mark or exc.problem_mark
    return mark.line + 1 if mark is not None else None


def _describe(exc: yaml.MarkedYAMLError) -> str:
    reason = exc.problem or "invalid YAML"
    if exc.context:
        reason = f"{exc.context}, {reason}"
    if exc.context_mark is not None and exc.problem_mark is not None and exc.problem_mark.line != exc.context_mark.line:
        reason += f" (on line {exc.problem_mark.line + 1})"
    return reason


def read_yaml(path: str | Path) -> YamlDocument:
    path = Path(path)
    return parse_yaml(read_text_file(path, "a YAML file"), str(path))


def read_text_file(path: Path, kind: str, *, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of an input file, or a ScenarioError naming it: missing, unreadable, not a regular file (a
    FIFO or a device could stream forever), larger than `max_bytes`, or not text."""
    try:
        if path.is_dir():
            raise ScenarioError(Problem(f"is a directory, expected {kind}", file=str(path)))
        if path.exists() and not path.is_file():
            raise ScenarioError(Problem(f"not a regular file (a pipe or a device), expected {kind}", file=str(path)))
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise ScenarioError(Problem("no such file", file=str(path))) from None
    except PermissionError:
        raise ScenarioError(Problem("permission denied: the file cannot be read", file=str(path))) from None
    except OSError as exc:
        raise ScenarioError(Problem(f"cannot be read: {exc.strerror or exc}", file=str(path))) from None
    if len(raw) > max_bytes:
        raise ScenarioError(Problem(f"larger than {max_bytes // 2**20} MiB, more than any {kind} needs",
                                    file=str(path)))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ScenarioError(Problem(f"not UTF-8 text ({exc.reason}): a binary file?", file=str(path),
                                    line=line)) from None


def _record_lines(root: yaml.Node, lines: dict[PathKey, int], file: str) -> None:
    """Every value's line, walking the node graph without recursion. Aliases are walked where they are used (their
    values are the document's too), so the walk also bounds what a document expands to: an alias of an alias of ... (a
    "billion laughs" file), an anchor that contains itself, or nesting past any real scenario's depth is refused
    before anything is built from it."""
    stack: list[tuple[yaml.Node, PathKey, frozenset[int]]] = [(root, (), frozenset())]
    visited = 0
    while stack:
        node, path, ancestors = stack.pop()
        visited += 1
        if visited > MAX_YAML_VALUES:
            raise ScenarioError(Problem(f"the document expands to more than {MAX_YAML_VALUES:,} values (anchors and "
                                        "aliases that repeat each other?)", file=file, line=node.start_mark.line + 1))
        if len(path) > MAX_YAML_DEPTH:
            raise ScenarioError(Problem(f"nested more than {MAX_YAML_DEPTH} levels deep", path=dotted(path[:3]) + "…",
                                        file=file, line=node.start_mark.line + 1))
        if id(node) in ancestors:
            raise ScenarioError(Problem("an anchor contains an alias of itself: the value would be endless",
                                        path=dotted(path), file=file, line=node.start_mark.line + 1))
        lines.setdefault(path, node.start_mark.line + 1)
        inside = ancestors | {id(node)}
        children: list[tuple[yaml.Node, PathKey]] = []
        if isinstance(node, yaml.MappingNode):
            seen: dict[object, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ScenarioError(Problem(f"duplicate key {key!r} (first written on line {seen[key]})",
                                                path=dotted(path + (key,)), file=file, line=line))
                seen[key] = line
                lines[path + (key,)] = line
                children.append((value_node, path + (key,)))
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, path + (index,)) for index, item in enumerate(node.value)]
        # In reverse, so the walk (last in, first out) visits them in file order, as `setdefault` expects.
        stack.extend((child, child_path, inside) for child, child_path in reversed(children))
