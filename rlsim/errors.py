"""Errors a user can cause, each carrying enough to fix the input without reading a traceback."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: where it is, what was there, and what would be valid."""

    message: str
    path: str = ""  # dotted field path, e.g. "placement.training.tp"
    file: str | None = None
    line: int | None = None  # 1-based
    value: object = None
    valid: str | None = None  # what would be accepted
    suggestion: str | None = None  # did-you-mean

    def location(self) -> str:
        where = self.file or "<scenario>"
        if self.line is not None:
            where += f":{self.line}"
        return where

    def render(self) -> str:
        head = f"{self.location()}: "
        # `--set PATH=VALUE` already names the field; saying it again adds nothing.
        if self.path and not head.startswith(f"--set {self.path}="):
            head += f"{self.path}: "
        text = head + self.message
        hints = []
        if self.suggestion:
            hints.append(f"did you mean {self.suggestion!r}?")
        if self.valid:
            hints.append(f"valid: {self.valid}")
        if hints:
            text += "\n  " + "; ".join(hints)
        return text


class ScenarioError(ValueError):
    """A scenario (or profile, or sweep) file is malformed. Holds one or more Problems, first one most relevant."""

    def __init__(self, problems: list[Problem] | Problem):
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        if not self.problems:
            raise ValueError("ScenarioError needs at least one problem")
        super().__init__(self.render())

    @property
    def first(self) -> Problem:
        return self.problems[0]

    @property
    def file(self) -> str | None:
        return self.first.file

    @property
    def line(self) -> int | None:
        return self.first.line

    @property
    def path(self) -> str:
        return self.first.path

    @property
    def value(self) -> object:
        return self.first.value

    @property
    def valid(self) -> str | None:
        return self.first.valid

    @property
    def suggestion(self) -> str | None:
        return self.first.suggestion

    def render(self) -> str:
        return "\n".join(p.render() for p in self.problems)


@dataclass(eq=False)  # not frozen: raising sets __traceback__ on it
class InfeasibleError(Exception):
    """A configuration is valid but cannot run: something does not fit. Says what, by how much, and what would fit."""

    role: str
    needed_bytes: float
    available_bytes: float
    hints: tuple[str, ...] = field(default=())
    what: str = "GPU memory"

    def __str__(self) -> str:
        gib = 2**30
        text = (
            f"{self.role} does not fit in {self.what}: needs {self.needed_bytes / gib:.1f} GiB per GPU, "
            f"{self.available_bytes / gib:.1f} GiB available"
        )
        if self.hints:
            text += "\n  would fit with: " + "; ".join(self.hints)
        return text


class ScenarioWarning(UserWarning):
    """A valid scenario that probably does not say what its author meant; the CLI prints it, notebooks show it."""

    def __init__(self, problem: Problem):
        super().__init__(problem.render())
        self.problem = problem


class UnknownName(LookupError):
    """A name (GPU profile, interconnect, model) that no catalog entry has. The config layer turns it into a Problem."""

    def __init__(self, kind: str, name: str, known: list[str], suggestion: str | None):
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        self.suggestion = suggestion
        super().__init__(f"unknown {kind} {name!r}")


class TraceFormatError(ValueError):
    """A trace file is missing, empty or not in the format expected; the message names the file and line. Raised by
    the trace readers (rlsim.traces) and turned into a ScenarioError at the field that names the file."""
