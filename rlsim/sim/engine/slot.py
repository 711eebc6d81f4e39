"""A running sequence's place in its engine, and its group's shared prompt there."""
from __future__ import annotations

from mypy_extensions import i64

from rlsim.sim.sequence import Rollout


class Slot:
    """Where a running sequence stands: its prefill still to run, and where its decoding started (its progress is
    derived from the engine's iteration counter, so booking an iteration touches no slot)."""

    __slots__ = ("rollout", "order", "own_prompt", "prompt", "prefill_left", "computed", "start_iteration",
                 "start_generated", "finish", "live", "decoding", "preempted_by", "running_at")

    def __init__(self, rollout: Rollout, order: i64):
        self.rollout = rollout
        self.order = order  # admission order: the preemption victim is the latest, finishes tie-break by it
        # Set by the KV ledger on admission:
        self.own_prompt: i64 = 0  # prompt tokens in its own KV (0 when its group's prompt is shared)
        self.prompt: SharedPrompt | None = None  # with prefix sharing, its group's prompt in the cache
        self.prefill_left: i64 = 0  # tokens still to prefill; 0 once it decodes
        self.computed: i64 = 0  # tokens in its KV cache before its next prefill chunk
        # Set when it joins the decode batch:
        self.start_iteration: i64 = 0  # engine iteration at which it started decoding
        self.start_generated: i64 = 0  # its generated tokens then
        self.finish: i64 = 0  # engine iteration at which its turn ends: its place in the finish heap, with `order`
        self.live = True  # False once it left the engine (its entry in the finish heap is then stale)
        self.decoding = False  # in the decode batch: its `generated` is derived from the iteration counter
        self.preempted_by: i64 = -1  # the last preemption chain planned that preempts it (`KVLedger.plan_ahead`'s number)
        self.running_at: i64 = -1  # its place among the engine's running sequences (`RunningSlots`), -1 when not there


class SharedPrompt:
    """A GRPO group's prompt in an engine's KV cache, with prefix sharing: its tokens, and how many of the group's
    sequences running there hold it (0: not cached). Each holder's slot points to it, so a sequence leaving releases
    it without looking its group up, and so does each of the group's rollouts that waited or ran there
    (`Rollout.shared_prompt`), so its next admission finds it without a lookup (`rlsim.sim.engine.kv_ledger.KVLedger`,
    the `ledger` whose index of prompts holds it while `indexed`). What plans ahead mark on it, each by its number
    (`KVLedger.plan_ahead`): `planned_by`, the last prefill run that admits a sequence of the group, whose prompt is
    `planned_tokens`; `departed_by`, the last preemption chain that preempts its holders, `departed` of them."""

    __slots__ = ("tokens", "holders", "ledger", "indexed", "planned_by", "planned_tokens", "departed_by", "departed")

    def __init__(self, tokens: i64, ledger: object):
        self.tokens = tokens
        self.holders: i64 = 0
        self.ledger = ledger
        self.indexed = True
        self.planned_by: i64 = -1
        self.planned_tokens: i64 = 0
        self.departed_by: i64 = -1
        self.departed: i64 = 0
