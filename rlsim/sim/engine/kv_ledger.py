"""What an engine's KV cache holds, in tokens, and whether an admission fits."""
from __future__ import annotations

from collections import OrderedDict

from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import Rollout


class KVLedger:
    """The KV cache of one engine, `capacity` tokens.

    A running sequence holds its prompt and every token it generated; admission reserves the context it will hold
    after its prefill (prompt + generated + 1) up front, so prefilling never overflows the cache and only decoding
    grows it. With prefix `sharing`, a GRPO group's prompt is held once while any sequence of the group runs here, and
    a sequence whose group's prompt is here prefills only its own tokens. Trajectories that released their slot for
    tool calls leave their context behind as evictable entries, reclaimed least recently released first whenever
    room is needed; the cache holds only those (and their group's prompt when they held it last).

    `used` is booked as of the engine's last batch-changing event: a fast decode stretch under way adds its growth
    when it ends.
    """

    __slots__ = ("capacity", "sharing", "used", "cached_prefill_tokens", "_groups", "_released", "_released_tokens")

    def __init__(self, capacity: int, sharing: bool):
        self.capacity = capacity
        self.sharing = sharing
        self.used = 0  # held or reserved by running sequences
        self.cached_prefill_tokens = 0  # context tokens admissions found cached instead of prefilling
        self._groups: dict[int, list[int]] = {}  # group -> [its running sequences, prompt tokens] (sharing)
        # Released trajectories' contexts, least recently released first: rollout -> (tokens, holds the prompt).
        self._released: OrderedDict[Rollout, tuple[int, bool]] = OrderedDict()
        self._released_tokens = 0

    def fits(self, rollout: Rollout, room: int, used: int | None = None) -> bool:
        """Whether admitting `rollout` fits beside `room` more tokens the running sequences will write (with `used`
        tokens in use: a plan ahead's; default: now)."""
        return (self.used if used is None else used) + room + self.admission_tokens(rollout) <= self.capacity

    def admission_tokens(self, rollout: Rollout) -> int:
        """The KV tokens admitting `rollout` reserves: its context and first token, less its group's prompt when
        that is cached."""
        shared = self.sharing and rollout.group in self._groups
        return rollout.context_tokens - rollout.prompt_tokens + 1 + (0 if shared else rollout.prompt_tokens)

    @property
    def holds_released(self) -> bool:
        """Whether released trajectories' contexts are cached (admissions may revive one and evict others)."""
        return bool(self._released)

    def admission_plan(self, rollout: Rollout, planned: dict[int, int]) -> tuple[int, int] | None:
        """What `admit` would reserve for `rollout` and find cached, as (KV tokens, context tokens), for a plan ahead
        with no released context cached (`holds_released`): its group's prompt is cached when its running sequences
        hold it here, or when a rollout the plan admits ahead of it does (`planned`: group -> prompt tokens). None
        when its prompt differs from its group's, which `admit` refuses. Read, never changed."""
        context, prompt = rollout.context_tokens, rollout.prompt_tokens
        if not self.sharing:
            return context + 1, 0
        holders = self._groups.get(rollout.group)
        held = holders[1] if holders is not None else planned.get(rollout.group)
        if held is None:
            return context + 1, 0
        if held != prompt:
            return None
        # vLLM recomputes at least the last token of a cached prefix, as in `admit`.
        return context - prompt + 1, min(prompt, context - 1)

    def admit(self, slot: Slot, room: int, context: int) -> None:
        """Reserve the KV of the slot's rollout, whose context is `context` tokens, and set what it prefills: the
        cached prefix is its group's prompt (held by its running sequences, or revived from this trajectory's entry),
        then the trajectory's own released context, usable only behind its prompt. Released contexts are evicted until
        `room` more tokens fit."""
        rollout = slot.rollout
        sharing, prompt = self.sharing, rollout.prompt_tokens
        holders = self._groups.get(rollout.group) if sharing else None  # its group's, when its prompt is here
        released = self._released
        tokens, with_prompt = 0, False
        if released:  # only trajectories back from tool calls leave entries: most admissions find none
            entry = released.pop(rollout, None)
            if entry is not None:
                tokens, with_prompt = entry
                self._released_tokens -= tokens
        if not sharing:
            prefix = tokens
        elif holders is not None or with_prompt:
            prefix = prompt + tokens - (prompt if with_prompt else 0)
        else:
            prefix = 0
        # vLLM recomputes at least the last token of a cached prefix, to sample from its logits.
        cached = prefix if prefix < context - 1 else context - 1  # min() by comparison: every admission asks
        self.cached_prefill_tokens += cached
        own_prompt = 0 if sharing else prompt
        if holders is not None:
            if holders[1] != prompt:
                raise ValueError(f"rollouts of group {rollout.group} have prompts of {holders[1]} and "
                                 f"{prompt} tokens: a group shares one prompt")
            holders[0] += 1
        elif sharing:
            self._groups[rollout.group] = [1, prompt]
            self.used += prompt
        self.used += own_prompt + context - prompt + 1
        slot.own_prompt = own_prompt
        slot.prefill_left = context - cached
        slot.computed = cached
        self.trim(room)

    def drop(self, slot: Slot, tokens: int) -> None:
        """The slot's sequence leaves holding a context of `tokens` (its reservation while it prefills): free its
        KV, and its group's prompt when it was the group's last here."""
        rollout = slot.rollout
        self.used -= slot.own_prompt + tokens - rollout.prompt_tokens
        self._release_prompt(rollout)

    def prompt_holders(self) -> dict[int, list[int]] | None:
        """With prefix sharing, each group with a sequence running here -> [its running sequences, its prompt tokens],
        to plan ahead on (read, never changed: the ledger's own dict, typed as one so that compiled code reads it
        directly); None without sharing."""
        return self._groups if self.sharing else None

    def release(self, slot: Slot) -> None:
        """The slot's trajectory leaves for its tool calls: its KV becomes an evictable entry, but for the turn's last
        token, whose KV was never written."""
        rollout = slot.rollout
        own = slot.own_prompt + rollout.context_tokens - rollout.prompt_tokens
        self.used -= own
        last = self._release_prompt(rollout)
        entry = own - 1 + (rollout.prompt_tokens if last else 0)
        self._released[rollout] = (entry, last or not self.sharing)
        self._released_tokens += entry

    def trim(self, room: int) -> None:
        """Evict released contexts, least recently released first, until `room` more tokens fit."""
        released = self._released
        while released and self.used + room + self._released_tokens > self.capacity:
            _, (tokens, _) = released.popitem(last=False)
            self._released_tokens -= tokens

    def _release_prompt(self, rollout: Rollout) -> bool:
        """One fewer running sequence of its group; frees the shared prompt when it was the last. Whether it was."""
        if not self.sharing:
            return False
        holders = self._groups[rollout.group]
        holders[0] -= 1
        if holders[0]:
            return False
        del self._groups[rollout.group]
        self.used -= holders[1]
        return True
