"""Where data that comes with rlsim lives: inside an installed wheel (rlsim/_shipped/, see pyproject.toml's
force-include), else at its place in a source checkout."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def shipped(in_wheel: str, in_checkout: str) -> Path:
    """The wheel's copy, `rlsim/_shipped/<in_wheel>`, when it exists; else `<checkout>/<in_checkout>`."""
    wheel = PACKAGE / "_shipped" / in_wheel
    return wheel if wheel.exists() else PACKAGE.parent / in_checkout
