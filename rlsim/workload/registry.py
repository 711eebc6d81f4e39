"""A name → policy table: what `@register_…("name")` decorators fill and YAML names select."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Policies of one kind, by the name the YAML uses. Filled once at import by decorators; read-only after."""

    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            self._entries[name] = entry
            return entry
        return decorate

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no {self.what} named {name!r}; known: {', '.join(sorted(self._entries))}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)
