"""What an importer needs whatever the framework: the table of keys it maps (`KeyRule`, the data docs/import.md's
tables are checked against), a `Reader` that gives each key's value (the user's, else the framework's default) with
where it came from and records which keys were used, and a `Draft` of the scenario's fields with a comment each."""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from rlsim.errors import Problem, ScenarioError
from rlsim.importers.settings import Settings, resolve


@dataclass(frozen=True)
class KeyRule:
    """One framework key the importer reads: the rlsim field it sets and how it converts."""

    key: str
    field: str
    note: str


@dataclass(frozen=True)
class Value:
    value: Any
    origin: str  # "run.sh line 14" or "default of verl's ppo_trainer.yaml"
    set_by_user: bool


class Reader:
    """The settings of one run, read through the framework's table of keys and its defaults."""

    def __init__(self, settings: Settings, rules: tuple[KeyRule, ...], defaults: dict[str, tuple[Any, str]]):
        self.settings = settings
        self.known = {rule.key for rule in rules}
        self.defaults = defaults  # key -> (value, the framework file that sets it)
        self.used: set[str] = set()

    def _lookup(self, key: str) -> Any:
        if key in self.settings:
            return self.settings[key].value
        return self.defaults.get(key, (None, ""))[0]

    def get(self, key: str) -> Value:
        if key not in self.known:
            raise KeyError(f"{key} is read but not in the importer's table of keys")  # a bug, not the user's input
        self.used.add(key)
        if key in self.settings:
            setting = self.settings[key]
            return Value(resolve(setting.value, key, self._lookup), f"{key}={_short(setting.value)} "
                         f"({setting.origin})" if not setting.how else setting.origin, True)
        value, source = self.defaults.get(key, (None, "the framework"))
        return Value(resolve(value, key, self._lookup), f"default of {source}", False)

    def is_set(self, key: str) -> bool:
        return key in self.settings

    def problem(self, key: str, message: str, **details: Any) -> Problem:
        setting = self.settings.get(key)
        if setting is None:
            source = self.defaults.get(key, (None, "the framework"))[1]
            return Problem(message + " (not set by the input: the default of " + source + ")", path=key, **details)
        return Problem(message, path=key, file=setting.file, line=setting.line, value=setting.value, **details)

    def integer(self, key: str, minimum: int = 1) -> tuple[int, str]:
        found = self.get(key)
        if isinstance(found.value, bool) or not isinstance(found.value, int) or found.value < minimum:
            raise ScenarioError(self.problem(key, f"expected an integer >= {minimum}, got {found.value!r}"))
        return found.value, found.origin

    def number(self, key: str) -> tuple[float, str]:
        found = self.get(key)
        if isinstance(found.value, bool) or not isinstance(found.value, (int, float)):
            raise ScenarioError(self.problem(key, f"expected a number, got {found.value!r}"))
        return float(found.value), found.origin

    def flag(self, key: str) -> tuple[bool, str]:
        found = self.get(key)
        if not isinstance(found.value, bool):
            raise ScenarioError(self.problem(key, f"expected true or false, got {found.value!r}"))
        return found.value, found.origin

    def text(self, key: str) -> tuple[str, str]:
        found = self.get(key)
        if not isinstance(found.value, str) or not found.value or found.value == "???":
            raise ScenarioError(self.problem(key, f"expected a name, got {found.value!r}"))
        return found.value, found.origin

    def leftover(self, ignored: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """(unmapped, ignored): the user's keys the importer did not use, by name; the ignored ones match a pattern
        of settings that do not change how long a step takes."""
        unmapped: list[str] = []
        skipped: list[str] = []
        for key in sorted(self.settings):
            if key in self.used:
                continue
            (skipped if any(fnmatchcase(key, p) for p in ignored) else unmapped).append(key)
        return unmapped, skipped


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Draft:
    """The scenario's fields by dotted path (`cluster.pools[0].gpu`), each with the comment saying where it came
    from, in the order they were set."""

    fields: dict[str, tuple[Any, str]] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def set(self, path: str, value: Any, origin: str) -> None:
        self.fields[path] = (value, origin)

    def value(self, path: str) -> Any:
        return self.fields[path][0]


def markdown_table(rules: tuple[KeyRule, ...], framework: str) -> str:
    """The mapping table docs/import.md shows, one row per key (tests check the page against it)."""
    rows = [f"| {framework} key | rlsim field | how it converts |", "|---|---|---|"]
    rows += [f"| `{r.key}` | `{r.field}` | {r.note.replace('|', '/')} |" for r in rules]
    return "\n".join(rows)
