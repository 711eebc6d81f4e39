"""A framework's configuration as flat settings, `dotted.key -> value` with the file and line each came from: YAML
files with Hydra-style `defaults:` (local files merged parent first), `key=value` overrides, and OmegaConf
interpolations (`${a.b}`, `${oc.select:a.b,default}`, `${mul:x,y}`, `${.sibling}`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlsim.errors import Problem, ScenarioError
from rlsim.yamlsource import YamlDocument, read_yaml


@dataclass(frozen=True)
class Setting:
    """One key's value and where it was written."""

    value: Any
    file: str
    line: int | None
    how: str = ""  # e.g. "+key=value" for an override; shown in the provenance comment

    @property
    def origin(self) -> str:
        where = Path(self.file).name + (f" line {self.line}" if self.line is not None else "")
        return f"{self.how} ({where})" if self.how else where


Settings = dict[str, Setting]


def flatten(data: Any, doc: YamlDocument, prefix: tuple[str, ...] = ()) -> Settings:
    """Leaf values of a mapping by dotted key (lists and empty mappings are leaves)."""
    found: Settings = {}
    if isinstance(data, dict) and data:
        for key, value in data.items():
            found.update(flatten(value, doc, prefix + (str(key),)))
    elif prefix:
        found[".".join(prefix)] = Setting(data, doc.file, doc.line_of(prefix))
    return found


def read_config(path: Path, notes: list[str], seen: tuple[Path, ...] = ()) -> Settings:
    """A YAML config with its `defaults:` merged under it, recursively. Defaults that are not local files (a
    framework's packaged configs) are listed in `notes`: the importer then uses that framework's default values."""
    path = path.resolve() if path.exists() else path
    if path in seen:
        raise ScenarioError(Problem(f"defaults: {path.name} includes itself", file=str(seen[-1])))
    doc = read_yaml(path)
    if not isinstance(doc.data, dict):
        raise ScenarioError(Problem("expected a YAML mapping of settings", file=doc.file, line=1))
    data = dict(doc.data)
    merged: Settings = {}
    for parent, package in _defaults(data.pop("defaults", None), doc):
        candidate = _local_file(path.parent, parent)
        if candidate is None:
            notes.append(f"defaults entry {parent!r} of {path.name} is not a local file: its values are the framework's "
                         "defaults")
            continue
        for key, setting in read_config(candidate, notes, seen + (path,)).items():
            merged[f"{package}.{key}" if package else key] = setting
    for key, setting in flatten(data, doc).items():
        _drop_below(merged, key)
        merged[key] = setting
    return merged


def _drop_below(settings: Settings, key: str) -> None:
    """A child that sets a whole mapping (or a value) replaces the parent's keys below it."""
    for old in [k for k in settings if k.startswith(key + ".")]:
        del settings[old]


def _defaults(entries: Any, doc: YamlDocument) -> list[tuple[str, str]]:
    """(file name, package it is merged at) for each `defaults:` entry; `_self_` is this file, read last."""
    if entries is None:
        return []
    if isinstance(entries, str):
        return [(entries, "")]
    if not isinstance(entries, list):
        raise ScenarioError(doc.problem(("defaults",), "expected a file name or a list of them",
                                        value=entries))
    found = []
    for entry in entries:
        if entry == "_self_":
            continue
        if isinstance(entry, str):
            found.append((entry, ""))
        elif isinstance(entry, dict) and len(entry) == 1:
            [(group, name)] = entry.items()
            group = str(group)
            folder, _, package = group.partition("@")
            if name is None:
                continue
            found.append((f"{folder}/{name}", package or folder.replace("/", ".")))
    return found


def _local_file(folder: Path, name: str) -> Path | None:
    name = name.removeprefix("override ").strip()
    for candidate in (folder / name, folder / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    return None


def override(text: str, file: str, line: int | None) -> tuple[str, Setting]:
    """`key=value`, `+key=value` or `++key=value` as a setting; the value is read as YAML, as Hydra reads it."""
    key, equals, raw = text.partition("=")
    name = key.lstrip("+~")
    if not equals or not re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
        raise ScenarioError(Problem(f"not a key=value override: {text!r}", file=file, line=line))
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return name, Setting(value, file, line, how=text)


_INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")


def resolve(value: Any, key: str, lookup: Any, depth: int = 0) -> Any:
    """`value` with its interpolations replaced, innermost first; `lookup(dotted_key)` gives another key's value (None
    if unset). An expression it cannot evaluate is left as written."""
    for _ in range(32):
        if not isinstance(value, str) or depth > 10:
            return value
        match = _INTERPOLATION.search(value)
        if match is None:
            return value
        found = _evaluate(match.group(1), key, lookup, depth)
        if found is None:
            return value
        whole = match.span() == (0, len(value))
        value = found if whole else value[:match.start()] + str(found) + value[match.end():]
    return value


def _evaluate(expression: str, key: str, lookup: Any, depth: int) -> Any:
    expression = expression.strip()
    resolver, colon, arguments = expression.partition(":")
    if colon and resolver == "oc.select":
        target, _, default = arguments.partition(",")
        found = _value_of(target.strip(), key, lookup, depth)
        return found if found is not None else (yaml.safe_load(default) if default.strip() else None)
    if colon and resolver == "mul":
        factors = [_number(part.strip(), key, lookup, depth) for part in arguments.split(",")]
        if any(f is None for f in factors):
            return None
        product: float = 1
        for factor in factors:
            product *= factor or 0
        return int(product) if float(product).is_integer() else product
    if colon:
        return None
    return _value_of(expression, key, lookup, depth)


def _value_of(target: str, key: str, lookup: Any, depth: int) -> Any:
    if target.startswith("."):
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        target = f"{parent}{target}" if parent else target.lstrip(".")
    found = lookup(target)
    return resolve(found, target, lookup, depth + 1)


def _number(text: str, key: str, lookup: Any, depth: int) -> float | int | None:
    value = resolve(text, key, lookup, depth + 1) if "${" in text else yaml.safe_load(text)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
