"""What an engine's process is doing, and the pauses asked of it."""
from __future__ import annotations

from enum import Enum
from typing import Literal

import simpy

PauseMode = Literal["drain", "interrupt", "hold"]
_URGENCY: dict[PauseMode, int] = {"drain": 0, "hold": 1, "interrupt": 2}  # how soon each stops the running sequences


class EngineState(Enum):
    """What the engine's process is doing, which decides what a wake-up (a submit, a tool return, a pause) does."""

    BUSY = "busy"  # at a boundary or in an iteration (or a stretch already woken): the next boundary sees the change
    DECODING = "decoding"  # sleeping through a fast decode stretch: a wake-up cuts it short
    IDLE = "idle"  # nothing to run: a wake-up starts the next boundary
    PAUSED = "paused"  # stopped until resumed


class PauseRequest:
    """A pause asked for and not yet taken: how the running sequences stop (`mode`), and the event fired once the
    engine is paused."""

    __slots__ = ("mode", "taken")

    def __init__(self, mode: PauseMode, taken: simpy.Event):
        self.mode = mode
        self.taken = taken

    def escalate(self, mode: PauseMode) -> None:
        """Another pause is asked for before this one is taken: the one that stops sooner wins."""
        if _URGENCY[mode] > _URGENCY[self.mode]:
            self.mode = mode
