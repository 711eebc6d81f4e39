"""What an engine's process is doing, the pause asked of it, and how a wake-up reaches it."""
from __future__ import annotations

from collections.abc import Generator
from enum import Enum
from typing import Literal

import simpy

PauseMode = Literal["drain", "interrupt", "hold"]
_URGENCY: dict[PauseMode, int] = {"drain": 0, "hold": 1, "interrupt": 2}  # how soon each stops the running sequences


class Activity(Enum):
    """What the engine's process is doing, which decides what a wake-up (a submit, a tool return, a pause) does."""

    BUSY = "busy"  # at a boundary or in an iteration (or a stretch already woken): the next boundary sees the change
    DECODING = "decoding"  # sleeping through a fast decode stretch: a wake-up cuts it short
    # Sleeping through long prefills' chunks (rlsim.sim.engine.prefill_run): a wake-up cuts it short; a queued
    # rollout wakes it only as the queue's head that fits (`SequenceLifecycle.queued`), since a run ends where the
    # last chunk leaves budget for the head.
    PREFILLING = "prefilling"
    IDLE = "idle"  # nothing to run: a wake-up starts the next boundary
    PAUSED = "paused"  # stopped until resumed


# An enum member looked up on its class costs several times a global: the engine checks its activity on every event.
BUSY, DECODING, PREFILLING, IDLE, PAUSED = (Activity.BUSY, Activity.DECODING, Activity.PREFILLING, Activity.IDLE,
                                            Activity.PAUSED)


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


class EngineState:
    """The engine's process (started here from `run`), its `activity`, and the `pause` asked of it and not yet taken."""

    __slots__ = ("env", "activity", "pause", "process", "_wakeup")

    def __init__(self, env: simpy.Environment, run: Generator[simpy.Event, object, None]):
        self.env = env
        self.activity = BUSY
        self.pause: PauseRequest | None = None
        self._wakeup: simpy.Event | None = None  # what the process waits on while idle or paused
        self.process = env.process(run)

    def wake(self) -> None:
        """Something changed that the process should see now: an idle process starts a boundary, a fast decode
        stretch or prefill run is cut short; a busy process sees it at its next boundary anyway, a paused one once
        resumed."""
        if self.activity is IDLE:
            assert self._wakeup is not None
            if not self._wakeup.triggered:
                self._wakeup.succeed()
        elif self.activity is DECODING or self.activity is PREFILLING:
            self.activity = BUSY  # one interrupt per stretch
            self.process.interrupt()

    def ask_pause(self, mode: PauseMode) -> simpy.Event:
        """A pause of `mode`; the event fires once it is taken. A drain waits for the running sequences, so it wakes
        only an idle process."""
        if self.activity is PAUSED:
            return self.env.event().succeed()
        if self.pause is None:
            self.pause = PauseRequest(mode, self.env.event())
        else:
            self.pause.escalate(mode)
        if mode != "drain" or self.activity is IDLE:
            self.wake()
        return self.pause.taken

    def take_pause(self) -> simpy.Event:
        """The process pauses now, as asked: the event it waits on until resumed."""
        self.activity = PAUSED
        resumed = self._wakeup = self.env.event()
        pause, self.pause = self.pause, None
        assert pause is not None
        pause.taken.succeed()
        return resumed

    def resume(self) -> None:
        assert self.activity is PAUSED and self._wakeup is not None
        self.activity = BUSY
        self._wakeup.succeed()

    def idle(self) -> simpy.Event:
        """The process has nothing to run: the event it waits on until woken."""
        self.activity = IDLE
        self._wakeup = self.env.event()
        return self._wakeup
