"""Multi-turn trajectories during their tool calls.

When a trajectory's turn ends with tool calls it leaves the decode batch for the calls' latency; the engine's
tool-wait policy decides whether it holds its sequence slot and KV cache meanwhile (`hold`: on return only the
appended tool tokens, and the turn's last token, are prefilled) or frees them (`release`: its KV becomes an evictable
entry of the KV ledger; on return it queues again, and prefills whatever of its context is no longer cached).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rlsim.registry import TOOL_WAITS, Registry
from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import MultiTurnRollout

if TYPE_CHECKING:
    from rlsim.sim.rollout import RolloutEngine

ToolWait = Callable[["RolloutEngine", MultiTurnRollout], bool]
"""A tool-wait policy: whether the trajectory, whose tool calls start now, keeps its slot and KV cache meanwhile."""
TOOL_WAIT_POLICIES: Registry[ToolWait] = TOOL_WAITS
register_tool_wait = TOOL_WAIT_POLICIES.register


@register_tool_wait("hold")
def hold_during_tools(engine: RolloutEngine, rollout: MultiTurnRollout) -> bool:
    """Keep the slot and the KV cache (verl / SGLang multi-turn rollouts): no recomputation, but the slot idles."""
    return True


@register_tool_wait("release")
def release_during_tools(engine: RolloutEngine, rollout: MultiTurnRollout) -> bool:
    """Free the slot for other sequences; the context stays in the prefix cache until room is needed."""
    return False


class ToolWaits:
    """The engine's trajectories whose tool calls run: those holding their slot (`held`), and those of them whose
    tools `returned`, taken up at the next boundary like every batch change."""

    __slots__ = ("engine", "policy", "calls", "held", "returned")

    def __init__(self, engine: RolloutEngine, policy: ToolWait):
        self.engine = engine
        self.policy = policy
        self.calls = 0  # turns that ended in tool calls
        self.held: dict[MultiTurnRollout, Slot] = {}
        self.returned: list[tuple[Slot, int]] = []  # held trajectories back from their tools: (slot, tokens appended)

    def call(self, slot: Slot) -> bool:
        """The slot's turn ended in tool calls: whether it holds its slot meanwhile."""
        rollout = slot.rollout
        assert isinstance(rollout, MultiTurnRollout)
        rollout.in_tool = True
        telemetry = self.engine.telemetry
        telemetry.changed = True
        self.calls += 1
        telemetry.observe("tool_call", rollout)
        if self.policy(self.engine, rollout):
            self.held[rollout] = slot
            return True
        return False

    def back(self, rollout: MultiTurnRollout, tokens: int) -> bool:
        """Its tool calls returned `tokens` tokens. Whether it held its slot (it continues at the next boundary);
        otherwise its context has grown by them, to queue again."""
        rollout.in_tool = False
        self.engine.telemetry.observe("tool_returned", rollout)
        slot = self.held.get(rollout)
        if slot is not None:
            self.returned.append((slot, tokens))
            return True
        rollout.turn += 1
        rollout.appended += tokens
        return False

    def drop(self, rollout: MultiTurnRollout) -> bool:
        """The trajectory loses its slot (preempted or interrupted): whether it held one through its tool calls."""
        return self.held.pop(rollout, None) is not None

    def resume_held(self, prefilling: list[Slot]) -> None:
        """Held trajectories back from their tools continue: their cache holds the context up to the turn's last
        token, whose KV was never written, so they prefill that token and the tool responses (reserving room for them,
        and for the next turn's first token, unchecked: the engine preempts if that overfills the cache)."""
        kv = self.engine.kv
        self.engine.telemetry.changed = True
        for slot, tokens in self.returned:
            rollout = slot.rollout
            assert isinstance(rollout, MultiTurnRollout)
            before = rollout.context_tokens
            rollout.turn += 1
            rollout.appended += tokens
            del self.held[rollout]
            slot.prefill_left = tokens + 1
            slot.computed = before - 1
            kv.used += tokens + 1
            prefilling.append(slot)
        self.returned.clear()
