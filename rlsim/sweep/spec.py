"""A sweep file: a base scenario plus axes over dotted field paths, read with the line of every entry.

    name: quickstart-splits              # default: the file's name
    base: ../quickstart.yaml             # a scenario file (relative to this file), or an inline scenario mapping
    set: {run.steps: 2}                  # overrides every point shares
    grid:                                # Cartesian product of every listed value
      placement.rollout.gpus: [2, 4, 6]
    zip:                                 # paired axes: the i-th values go together (equal lengths)
      - {placement.rollout.tp: [1, 2], placement.rollout.gpu_memory_utilization: [0.5, 0.7]}
    cases:                               # an explicit list of override sets, one axis
      - {placement.mode: colocated}
      - {placement.mode: disaggregated, schedule.mode: one_step_off}
    derived:                             # computed per point, in order (rlsim/sweep/expressions.py)
      placement.training.gpus: "8 - placement.rollout.gpus"
    constraints:                         # a point runs only when every one is true
      - "placement.rollout.gpus % placement.rollout.tp == 0"

Points are the product of the grid axes, each zip group and the cases (docs/sweeps.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlsim.errors import Problem, ScenarioError
from rlsim.sweep.expressions import Expression, ExpressionError
from rlsim.yamlsource import PathKey, YamlDocument, dotted, flow_text, parse_path, read_yaml

SECTIONS = ("name", "description", "base", "set", "grid", "zip", "cases", "derived", "constraints")


@dataclass(frozen=True)
class Axis:
    """One dimension of the product: its alternatives, each a set of dotted-path assignments."""

    choices: tuple[dict[str, Any], ...]
    lines: dict[str, int]  # dotted path -> the sweep-file line that sets it


@dataclass(frozen=True)
class Derived:
    path: str
    expression: Expression
    line: int | None


@dataclass(frozen=True)
class Constraint:
    expression: Expression
    line: int | None


# The most combinations a sweep's axes may make, counted before any is built: a grid of 10^21 points would otherwise be
# expanded, one scenario at a time, without end. A sweep of 100,000 simulated points already takes days.
MAX_POINTS = 100_000


@dataclass(frozen=True)
class SweepSpec:
    name: str
    description: str
    file: str
    base: YamlDocument  # the base scenario as written, with `set` applied
    base_dir: Path  # where the base scenario's relative paths resolve
    sweep_dir: Path  # where the sweep file lives (point ids are independent of where it sits on disk)
    axes: tuple[Axis, ...]
    derived: tuple[Derived, ...]
    constraints: tuple[Constraint, ...]
    set_lines: dict[str, int]

    @property
    def axis_paths(self) -> tuple[str, ...]:
        """The dotted paths the sweep varies, in the order written: the results table's axis columns."""
        paths: dict[str, None] = {}
        for axis in self.axes:
            for choice in axis.choices:
                paths.update(dict.fromkeys(choice))
        paths.update(dict.fromkeys(d.path for d in self.derived))
        return tuple(paths)

    def line_of(self, path: str) -> int | None:
        """The sweep-file line that sets `path` (or the nearest enclosing path), if the sweep sets it."""
        lines = {**self.set_lines, **{d.path: d.line for d in self.derived}}
        for axis in self.axes:
            lines.update(axis.lines)
        key = parse_path(path)
        for end in range(len(key), 0, -1):
            line = lines.get(dotted(key[:end]))
            if line is not None:
                return line
        return None


    def with_overrides(self, assignments: dict[str, Any]) -> SweepSpec:
        """The sweep with `rlsim sweep --set` applied to its base, after the file's own `set`, so every point shares
        it. A path the sweep varies (an axis or a derived value, or a field inside or around one) is refused: the
        axis would overrule the command line at every point, and silently."""
        varied = [(parse_path(path), path) for path in self.axis_paths]
        clashes = [Problem(f"the sweep varies {path} (line {self.line_of(path)}); --set cannot fix it for every point",
                           file=f"--set {text}={flow_text(value)}", valid="a path no axis or derived value sets")
                   for text, value in assignments.items() for key, path in varied
                   if _nested(parse_path(text), key)]
        if clashes:
            raise ScenarioError(clashes)
        # The command line wins over the file's `set`: a problem with such a field is the --set's, not the file's.
        set_lines = {p: line for p, line in self.set_lines.items()
                     if not any(_nested(parse_path(p), parse_path(text)) for text in assignments)}
        return replace(self, base=self.base.with_overrides(assignments), set_lines=set_lines)


def _nested(a: PathKey, b: PathKey) -> bool:
    """Whether one path is the other or inside it."""
    return a[:len(b)] == b or b[:len(a)] == a


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; bad input raises ScenarioError naming the file, line and entry."""
    return parse_sweep(read_yaml(path), Path(path).resolve().parent)


def parse_sweep(doc: YamlDocument, sweep_dir: Path) -> SweepSpec:
    reader = _Reader(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise ScenarioError(doc.problem((), "a sweep file is a mapping with `base` and axes", valid=", ".join(SECTIONS)))
    for key in data:
        if key not in SECTIONS:
            reader.problem((key,), f"unknown section {key!r}", valid=", ".join(SECTIONS))
    name = data.get("name", Path(doc.file).stem)
    if not isinstance(name, str) or not name:
        reader.problem(("name",), "expected a non-empty name")
    description = data.get("description", "")
    if not isinstance(description, str):
        reader.problem(("description",), "expected text")
    base, base_dir = reader.base(data.get("base"), sweep_dir)
    fixed = reader.assignments(("set",), data.get("set", {}))
    axes = [*reader.grid(data.get("grid", {})), *reader.zips(data.get("zip", [])), *reader.cases(data.get("cases", []))]
    derived = reader.derived(data.get("derived", {}))
    constraints = reader.constraints(data.get("constraints", []))
    combinations = math.prod(len(axis.choices) for axis in axes)
    if combinations > MAX_POINTS:
        reader.problem(("grid",), f"the axes make {combinations:,} combinations, more than the {MAX_POINTS:,} a sweep "
                       "expands (each point is a scenario to check and simulate)",
                       valid="fewer values per axis, or several sweeps")
    reader.raise_problems()
    assert base is not None
    if fixed:
        base = base.with_overrides(fixed)
    return SweepSpec(name, description, doc.file, base, base_dir, sweep_dir,
                     tuple(axes), tuple(derived), tuple(constraints), {p: doc.line_of(("set", p)) or 0 for p in fixed})


class _Reader:
    """Collects every problem of a sweep file before raising, so one run of `rlsim sweep` lists them all."""

    def __init__(self, doc: YamlDocument):
        self.doc = doc
        self.problems: list[Problem] = []

    def problem(self, at: PathKey, message: str, **details: Any) -> None:
        problem = self.doc.problem(at, message, **details)
        # A sweep's keys are dotted paths themselves: show them as written, not re-dotted.
        self.problems.append(Problem(problem.message, ".".join(str(p) for p in at), problem.file, problem.line,
                                     problem.value, problem.valid, problem.suggestion))

    def raise_problems(self) -> None:
        if self.problems:
            raise ScenarioError(self.problems)

    def line(self, at: PathKey) -> int:
        return self.doc.line_of(at) or 0

    def base(self, value: Any, sweep_dir: Path) -> tuple[YamlDocument | None, Path]:
        if isinstance(value, str):
            path = Path(value) if Path(value).is_absolute() else sweep_dir / value
            try:
                return read_yaml(path), path.resolve().parent
            except ScenarioError as err:
                self.problem(("base",), f"cannot read the base scenario: {err.first.message}", value=value)
                return None, sweep_dir
        if isinstance(value, dict):
            lines = {key[1:]: line for key, line in self.doc.lines.items() if key[:1] == ("base",)}
            return YamlDocument(data=value, file=self.doc.file, lines=lines), sweep_dir
        self.problem(("base",), "expected the path of a scenario file or an inline scenario mapping",
                     value=value, valid="base: ../quickstart.yaml, or base: {name: ..., cluster: ..., ...}")
        return None, sweep_dir

    def field_path(self, at: PathKey, path: Any) -> bool:
        if not isinstance(path, str):
            self.problem(at, f"expected a dotted field path, got {path!r}", valid="e.g. placement.rollout.gpus")
            return False
        try:
            parse_path(path)
        except ScenarioError:
            self.problem(at, f"not a field path: {path!r}", valid="e.g. placement.rollout.gpus or cluster.pools[0].nodes")
            return False
        return True

    def assignments(self, at: PathKey, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.problem(at, "expected a mapping of field paths to values", value=value,
                         valid="e.g. {run.steps: 2, placement.rollout.tp: 2}")
            return {}
        return {path: v for path, v in value.items() if self.field_path(at + (path,), path)}

    def value_list(self, at: PathKey, values: Any) -> list | None:
        if not isinstance(values, list) or not values:
            self.problem(at, "expected a non-empty list of values", value=values, valid="e.g. [1, 2, 4]")
            return None
        return values

    def grid(self, value: Any) -> list[Axis]:
        axes = []
        for path, values in self.assignments(("grid",), value).items():
            if self.value_list(("grid", path), values) is not None:
                axes.append(Axis(tuple({path: v} for v in values), {path: self.line(("grid", path))}))
        return axes

    def zips(self, value: Any) -> list[Axis]:
        if not isinstance(value, list):
            self.problem(("zip",), "expected a list of groups, each a mapping of field paths to equally long lists",
                         value=value)
            return []
        axes = []
        for index, group in enumerate(value):
            columns = self.assignments(("zip", index), group)
            lists = {path: self.value_list(("zip", index, path), values) for path, values in columns.items()}
            if not lists or any(v is None for v in lists.values()):
                continue
            lengths = {path: len(v) for path, v in lists.items() if v is not None}
            if len(set(lengths.values())) > 1:
                self.problem(("zip", index), "the lists of a zip group must have equal lengths",
                             value=", ".join(f"{p}: {n}" for p, n in lengths.items()))
                continue
            count = next(iter(lengths.values()))
            choices = tuple({path: lists[path][i] for path in lists} for i in range(count))  # type: ignore[index]
            axes.append(Axis(choices, {path: self.line(("zip", index, path)) for path in lists}))
        return axes

    def cases(self, value: Any) -> list[Axis]:
        if not isinstance(value, list):
            self.problem(("cases",), "expected a list of override mappings", value=value)
            return []
        if not value:
            return []
        choices: list[dict[str, Any]] = []
        lines: dict[str, int] = {}
        for index, case in enumerate(value):
            assignments = self.assignments(("cases", index), case)
            choices.append(assignments)
            for path in assignments:
                lines.setdefault(path, self.line(("cases", index, path)))
        return [Axis(tuple(choices), lines)]

    def derived(self, value: Any) -> list[Derived]:
        result = []
        for path, text in self.assignments(("derived",), value).items():
            expression = self.expression(("derived", path), text)
            if expression is not None:
                result.append(Derived(path, expression, self.line(("derived", path))))
        return result

    def constraints(self, value: Any) -> list[Constraint]:
        if not isinstance(value, list):
            self.problem(("constraints",), "expected a list of expressions", value=value,
                         valid='e.g. ["placement.rollout.gpus % placement.rollout.tp == 0"]')
            return []
        result = []
        for index, text in enumerate(value):
            expression = self.expression(("constraints", index), text)
            if expression is not None:
                result.append(Constraint(expression, self.line(("constraints", index))))
        return result

    def expression(self, at: PathKey, text: Any) -> Expression | None:
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            self.problem(at, "expected an expression (a string)", value=text, valid='e.g. "8 - placement.rollout.gpus"')
            return None
        try:
            return Expression.parse(str(text))
        except ExpressionError as exc:
            self.problem(at, str(exc), value=text)
            return None
