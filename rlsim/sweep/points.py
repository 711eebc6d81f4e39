"""Expand a sweep into points: every combination of its axes, derived values filled in, constraints applied, each a
fully validated Scenario with an id that is the hash of its resolved content."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsim.config.loader import scenario_from_document
from rlsim.config.schema import Scenario
from rlsim.errors import Problem, ScenarioError
from rlsim.sweep.expressions import ExpressionError
from rlsim.sweep.spec import SweepSpec
from rlsim.yamlsource import PathKey, dotted, parse_path

ID_LENGTH = 16  # hex digits of SHA-256: 64 bits, no collision in any sweep a person would run


@dataclass(frozen=True)
class Point:
    index: int  # position in the sweep's order
    id: str
    overrides: dict[str, Any]  # what this point sets on top of the base: axis values and derived values
    scenario: Scenario


@dataclass(frozen=True)
class Expansion:
    spec: SweepSpec
    points: tuple[Point, ...]
    skipped: int  # combinations a constraint ruled out
    duplicates: int  # combinations that resolved to the same scenario as an earlier point (run once)


def point_id(scenario: Scenario, relative_to: Path) -> str:
    """Hash of the resolved scenario. Absolute paths (trace files, profile folders) are hashed relative to the sweep
    file, so the id is the same on every machine and in every checkout."""
    content = _portable(scenario.model_dump(mode="json"), relative_to)
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


def _portable(value: Any, relative_to: Path) -> Any:
    if isinstance(value, dict):
        return {k: _portable(v, relative_to) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v, relative_to) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return Path(os.path.relpath(value, relative_to)).as_posix()
    return value


def expand(spec: SweepSpec) -> Expansion:
    """Every point of the sweep in order (axes vary last-fastest, as written). Raises ScenarioError for a point that
    is not a valid scenario, naming the sweep line that set the offending field."""
    points: list[Point] = []
    seen: set[str] = set()
    skipped = duplicates = 0
    base_values = _BaseValues(spec)
    for combination in itertools.product(*(axis.choices for axis in spec.axes)):
        overrides: dict[str, Any] = {}
        for choice in combination:
            overrides.update(choice)
        lookup = _lookup(overrides, base_values)
        for derived in spec.derived:
            overrides[derived.path] = _evaluate(spec, derived.expression, lookup, derived.line, overrides)
        if not all(_evaluate(spec, c.expression, lookup, c.line, overrides) for c in spec.constraints):
            skipped += 1
            continue
        scenario = _scenario(spec, overrides, len(points) + skipped + duplicates)
        identity = point_id(scenario, spec.sweep_dir)
        if identity in seen:
            duplicates += 1
            continue
        seen.add(identity)
        points.append(Point(len(points), identity, overrides, scenario))
    return Expansion(spec, tuple(points), skipped, duplicates)


def describe(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{path}={value}" for path, value in overrides.items()) or "the base scenario"


class _BaseValues:
    """Field values of the base scenario for expressions: as written first, then as resolved (defaults filled)."""

    def __init__(self, spec: SweepSpec):
        self.spec = spec
        self._resolved: Any = None

    def get(self, path: PathKey) -> Any:
        try:
            return _walk(self.spec.base.data, path)
        except KeyError:
            pass
        if self._resolved is None:
            try:
                scenario = scenario_from_document(self.spec.base, base_dir=self.spec.base_dir)
                self._resolved = scenario.model_dump(mode="json")
            except ScenarioError:
                self._resolved = {}
        return _walk(self._resolved, path)


def _walk(data: Any, path: PathKey) -> Any:
    for part in path:
        if isinstance(data, dict) and isinstance(part, str) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and -len(data) <= part < len(data):
            data = data[part]
        else:
            raise KeyError(path)
    return data


def _lookup(overrides: dict[str, Any], base: _BaseValues):
    def lookup(path: PathKey) -> Any:
        key = dotted(path)
        if key in overrides:
            return overrides[key]
        for written, value in overrides.items():  # a field inside a mapping an axis sets whole
            prefix = parse_path(written)
            if path[:len(prefix)] == prefix:
                try:
                    return _walk(value, path[len(prefix):])
                except KeyError:
                    break
        return base.get(path)
    return lookup


def _evaluate(spec: SweepSpec, expression, lookup, line: int | None, overrides: dict[str, Any]) -> Any:
    try:
        return expression.evaluate(lookup)
    except ExpressionError as exc:
        raise ScenarioError(Problem(f"{exc} (evaluating {expression.text!r} at {describe(overrides)})",
                                    file=spec.file, line=line)) from None


def _scenario(spec: SweepSpec, overrides: dict[str, Any], combination: int) -> Scenario:
    try:
        return scenario_from_document(spec.base.with_overrides(overrides), base_dir=spec.base_dir)
    except ScenarioError as err:
        where = f"combination {combination + 1} ({describe(overrides)})"
        problems = []
        for problem in err.problems:
            line = spec.line_of(problem.path) if problem.path else None
            # The sweep's own assignments are labelled like `--set` ones; a field the sweep does not set (no line) was
            # set on the command line, and that is where to point.
            from_sweep = problem.file is None or (problem.file.startswith("--set ") and line is not None)
            problems.append(Problem(f"{problem.message} — in {where}; add a constraint to skip such points",
                                    problem.path, spec.file if from_sweep else problem.file,
                                    line if from_sweep else problem.line, problem.value, problem.valid,
                                    problem.suggestion))
        # What the sweep set comes first: that is the line to edit (or to guard with a constraint).
        problems.sort(key=lambda p: p.file != spec.file)
        raise ScenarioError(problems) from None
