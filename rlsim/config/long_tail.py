"""What the package asks about a long-tail remedy (`schedule.long_tail`) outside the simulator.

A remedy is a way a synchronous RL step keeps its longest responses from setting its pace: RollPacker's tail
batching, UloRL's segment rollout, DUET's marker-gated abort. Each is one file in rlsim/sim/long_tail/ that registers a
`LongTailKind` under the `kind` tag the YAML uses: its parameter class (named as its paper names them), the builder
of the controller that runs it (only the simulator calls it), its cross-field checks, and the plain facts the
loader's size check and default warm-up read. So a new remedy is a new file, and the schema accepts it by
registration (`rlsim.fields.Variants`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlsim.fields import Frozen

if TYPE_CHECKING:
    from rlsim.config.schema import Scenario
    from rlsim.yamlsource import PathKey

# Reports a problem at a field of the scenario: (path, message, value=..., valid=...).
Fail = Callable[..., None]


class LongTailParams(Frozen):
    """The parameters of a long-tail remedy, tagged by its `kind` (each remedy's class says which)."""

    kind: str


def no_checks(scenario: Scenario, fail: Fail) -> None:
    """A remedy that any synchronous scenario can run."""


@dataclass(frozen=True)
class LongTailKind:
    """A remedy's entry in the registry."""

    params: type[LongTailParams]
    controller: Any  # builds the controller that runs the steps; only the simulator calls it
    # Responses the remedy launches per response a plain synchronous step launches (for the size check).
    launched_per_response: Callable[[Scenario], float]
    # Unfinished responses carry into the next step, so the run warms up for one step (rlsim.config.run_length).
    carries_over: bool
    check: Callable[[Scenario, Fail], None] = no_checks


def refuse_unless(condition: bool, fail: Fail, path: PathKey, message: str, *, value: Any, valid: str) -> None:
    """A check of one remedy: report `message` at `path` unless `condition` holds."""
    if not condition:
        fail(path, message, value=value, valid=valid)
