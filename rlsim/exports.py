"""Public names of a package that load on first use, so the command line's start-up (`rlsim --help`) does not pay
for the simulator, numpy, pydantic and plotly behind them."""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package`, each name in `homes` imported from its module."""

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)  # later lookups find it without this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
