"""What a rollout engine does as a sequence passes through it, between its iterations: the sequence joins the queue
(submitted, or back from tool calls that released its slot), samples the first token of a turn once its prefill
completes, and ends a turn — it finishes, or its tool calls start, after which it continues in the slot it held or
queues again. Each happens once per sequence and turn, never per iteration.

Admission, preemption and interruption are the scheduler's (`rlsim.sim.engine.scheduler`); whether a trajectory holds
its slot through its tool calls is the tool-wait policy's (`rlsim.sim.engine.tool_waits`).
"""
from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

from rlsim.sim.clock import sim_now
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.state import DECODING, IDLE, PREFILLING
from rlsim.sim.sequence import MultiTurnRollout, Rollout

if TYPE_CHECKING:
    from rlsim.sim.rollout import RolloutEngine


class SequenceLifecycle:
    """The engine's reactions to a sequence's own events. It reads the engine's parts through the engine, which
    builds its decode batch around `turn_end` before the other parts exist (as `ToolWaits` does); the weights'
    `version` and `on_finish` change during a run, so they are read there in any case."""

    __slots__ = ("engine", "env")

    def __init__(self, engine: RolloutEngine):
        self.engine = engine
        self.env = engine.env

    def queued(self, rollout: Rollout) -> None:
        """The rollout joined the queue: record a sample, and wake the engine if it idles, or if it decodes a stretch
        (or prefills a run, whose last chunk may leave room) the rollout could join at the next boundary — as the
        queue's head (first come, first served: the only rollout waiting; in a ranked queue, one that outranks the
        others) that fits. Behind heads a prefill run plans to admit, it changes nothing planned: the run ends
        where its plan finds the queue without a head and budget left."""
        engine = self.engine
        engine.telemetry.sample()
        state, scheduler = engine.state, engine.scheduler
        activity = state.activity
        if activity is IDLE or ((activity is DECODING or activity is PREFILLING) and scheduler.waiting[0] is rollout
                                and scheduler.fits_now(rollout)):
            state.wake()

    def first_token(self, slot: Slot) -> None:
        """The last prefill chunk sampled the sequence's next token: it decodes from now on, or its turn is over."""
        rollout = self.sampled(slot)
        if rollout.remaining <= 0:
            self.turn_end(slot)
            return
        self.engine.batch.join(slot)

    def sampled(self, slot: Slot) -> Rollout:
        """Book the token the slot's last prefill chunk sampled; its rollout."""
        engine = self.engine
        rollout = slot.rollout
        rollout.generated += 1
        engine.scheduler.generated_total += 1
        if rollout.version_started < 0:
            rollout.version_started = engine.version  # staleness counts from the oldest token
        engine.telemetry.observe("prefilled", rollout)
        return rollout

    def turn_end(self, slot: Slot) -> None:
        """The sequence generated the last token of its turn, and is out of the decode batch: it is done, or its tool
        calls start."""
        engine = self.engine
        rollout = slot.rollout
        if rollout.done:
            engine.scheduler.finish(slot)
            rollout.finished = sim_now(self.env)
            engine.telemetry.observe("finished", rollout)
            engine.environment.finished(rollout)
            engine.on_finish(rollout)
            return
        assert isinstance(rollout, MultiTurnRollout)
        turn = rollout.turns[rollout.turn]
        if not engine.tools.call(slot):
            engine.scheduler.release(slot)
        self.env.process(self._tools_return(rollout, turn.call_s, turn.tool_tokens))

    def _tools_return(self, rollout: MultiTurnRollout, call_s: tuple[float, ...], tokens: int) -> Generator:
        engine = self.engine
        yield from engine.environment.calls(engine, rollout, call_s)
        engine.settle()  # the queue it may join is sampled, so the boundaries before now come first
        if engine.tools.back(rollout, tokens):
            engine.state.wake()  # it continues at the next boundary, like every batch change
        elif engine.kv_fetch is not None:
            engine.kv_fetch.send(rollout)  # its next turn is a new request, prefilled on a prefill engine
        else:
            engine.scheduler.queue(rollout)
            self.queued(rollout)
