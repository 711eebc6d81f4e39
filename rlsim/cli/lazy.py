"""Handlers that import their command's implementation when it runs: `rlsim --help` builds every subcommand's parser,
and should not load the simulator, numpy, pydantic or plotly to do it."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib import import_module


def lazy_handler(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """`module.function(args)`, the module imported on the first call."""

    def handler(args: argparse.Namespace) -> int:
        return getattr(import_module(module), function)(args)

    return handler
