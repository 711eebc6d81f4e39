"""White-box tests that reach into the engine's classes — a spy patched over a method, a recorder subclassed to log
what it books — need those classes interpreted: compiled by mypyc (`pip install .`, `rlsim.compiled_engine`), a class
refuses both. They skip there; the behaviour they pin is the same code's, which the rest of the suite runs compiled."""
from __future__ import annotations

import pytest

from rlsim.compiled_engine import engine_build

needs_interpreted_engine = pytest.mark.skipif(
    engine_build() != "interpreted",
    reason="patches or subclasses engine classes, which the compiled engine (pip install .) does not allow")
