"""What an engine's KV cache holds, in tokens, and whether an admission fits."""
from __future__ import annotations

from collections import OrderedDict

from mypy_extensions import i64

from rlsim.sim.engine.slot import SharedPrompt, Slot
from rlsim.sim.sequence import Rollout

# Groups whose prompt no running sequence holds, kept in a ledger's index of prompts before it is rebuilt without them
# (while they are also at least half of it, so the index stays within twice the groups held, plus this): a preempted
# sequence is readmitted into its group's entry, where dropping the entry as its last holder left and making a new
# one at its readmission cost two dictionary writes each time (a ×4-length step preempts ~40,000 times, most often a
# group's only sequence on its engine).
IDLE_PROMPTS_KEPT = 64


class KVLedger:
    """The KV cache of one engine, `capacity` tokens.

    A running sequence holds its prompt and every token it generated; admission reserves the context it will hold
    after its prefill (prompt + generated + 1) up front, so prefilling never overflows the cache and only decoding
    grows it. With prefix `sharing`, a GRPO group's prompt is held once while any sequence of the group runs here, and
    a sequence whose group's prompt is here prefills only its own tokens. Trajectories that released their slot for
    tool calls leave their context behind as evictable entries, reclaimed least recently released first whenever
    room is needed; the cache holds only those (and their group's prompt when they held it last).

    Each group whose prompt is held here, or whose rollouts wait here, has a `SharedPrompt` in the ledger's index,
    which its sequences' slots point to; the ledger finds it by group the first time it meets each rollout and
    remembers it on the rollout (`Rollout.shared_prompt`), and keeps it once no sequence holds it, for the group's
    next admission (until such entries number more than IDLE_PROMPTS_KEPT and more than the held ones, when it
    forgets them all: a rollout then finds its group's entry afresh).

    `used` is booked as of the engine's last batch-changing event: a fast decode stretch under way adds its growth
    when it ends.
    """

    __slots__ = ("capacity", "sharing", "used", "cached_prefill_tokens", "_prompts", "_idle_prompts", "_plans",
                 "_released", "_released_tokens")

    def __init__(self, capacity: i64, sharing: bool):
        self.capacity = capacity
        self.sharing = sharing
        self.used: i64 = 0  # held or reserved by running sequences
        self.cached_prefill_tokens: i64 = 0  # context tokens admissions found cached instead of prefilling
        self._prompts: dict[int, SharedPrompt] = {}  # group -> its prompt here, held or idle (sharing)
        self._idle_prompts = 0  # of which no running sequence holds
        self._plans: i64 = 0  # plans ahead begun (`plan_ahead`)
        # Released trajectories' contexts, least recently released first: rollout -> (tokens, holds the prompt).
        self._released: OrderedDict[Rollout, tuple[int, bool]] = OrderedDict()
        self._released_tokens: i64 = 0

    def fits(self, rollout: Rollout, room: i64, used: i64 = -1) -> bool:
        """Whether admitting `rollout` fits beside `room` more tokens the running sequences will write (with `used`
        tokens in use: a plan ahead's; default, or negative: now). A native int rather than an optional one, which
        compiled code passes boxed."""
        return (self.used if used < 0 else used) + room + self.admission_tokens(rollout) <= self.capacity

    def admission_tokens(self, rollout: Rollout) -> int:
        """The KV tokens admitting `rollout` reserves: its context and first token, less its group's prompt when
        that is cached."""
        shared = self.sharing and self._entry(rollout).holders > 0
        return rollout.context_tokens - rollout.prompt_tokens + 1 + (0 if shared else rollout.prompt_tokens)

    def holds_prompt(self, group: int) -> bool:
        """Whether a sequence of `group` running here holds its prompt (with prefix sharing)."""
        shared = self._prompts.get(group)
        return shared is not None and shared.holders > 0

    @property
    def holds_released(self) -> bool:
        """Whether released trajectories' contexts are cached (admissions may revive one and evict others)."""
        return bool(self._released)

    def plan_ahead(self) -> i64:
        """A new plan ahead's number: a prefill run's (`admission_plan`, `plan_holds`) or a preemption chain's, with
        which it marks the prompt entries and slots it counts on (`SharedPrompt`, `Slot`); only plans read marks."""
        self._plans += 1
        return self._plans

    def admission_plan(self, rollout: Rollout, plan: i64) -> i64:
        """The KV tokens `admit` would reserve for `rollout`, for the plan ahead numbered `plan` (`plan_ahead`) with no
        released context cached (`holds_released`): its group's prompt is cached when its running sequences hold it
        here, or when a rollout the plan admits ahead of it does (`plan_holds`). -1 when its prompt differs from its
        group's, which `admit` refuses. What the reservation leaves out of its context and first token is the cached
        prompt (`planned_cached_tokens`). Changes nothing a result depends on (it may index the group's entry, idle).
        One native int rather than a tuple with the cached tokens: a ×4-length step plans tens of thousands of
        admissions."""
        context, prompt = rollout.context_tokens, rollout.prompt_tokens
        if not self.sharing:
            return context + 1
        entry = self._entry(rollout)
        if entry.holders:
            held = entry.tokens
        elif entry.planned_by == plan:
            held = entry.planned_tokens
        else:
            return context + 1
        if held != prompt:
            return -1
        return context - prompt + 1

    def plan_holds(self, rollout: Rollout, plan: i64) -> None:
        """The plan ahead numbered `plan` admits `rollout` (after `admission_plan`): its group's prompt is cached for
        the plan's later admissions, as the first of the group's it admits has it."""
        if self.sharing:
            entry = self._entry(rollout)
            if entry.planned_by != plan:
                entry.planned_by = plan
                entry.planned_tokens = rollout.prompt_tokens

    def admit(self, slot: Slot, room: i64, context: i64) -> None:
        """Reserve the KV of the slot's rollout, whose context is `context` tokens, and set what it prefills: the
        cached prefix is its group's prompt (held by its running sequences, or revived from this trajectory's entry),
        then the trajectory's own released context, usable only behind its prompt. Released contexts are evicted until
        `room` more tokens fit."""
        rollout = slot.rollout
        sharing, prompt = self.sharing, rollout.prompt_tokens
        shared = self._entry(rollout) if sharing else None
        held = shared is not None and shared.holders > 0  # its group's prompt is here
        released = self._released
        tokens, with_prompt = 0, False
        if released:  # only trajectories back from tool calls leave entries: most admissions find none
            entry = released.pop(rollout, None)
            if entry is not None:
                tokens, with_prompt = entry
                self._released_tokens -= tokens
        if not sharing:
            prefix = tokens
        elif held or with_prompt:
            prefix = prompt + tokens - (prompt if with_prompt else 0)
        else:
            prefix = 0
        # vLLM recomputes at least the last token of a cached prefix, to sample from its logits.
        cached = prefix if prefix < context - 1 else context - 1  # min() by comparison: every admission asks
        self.cached_prefill_tokens += cached
        own_prompt = 0 if sharing else prompt
        if shared is not None:
            self._hold(rollout.group, prompt, shared)
            slot.prompt = shared
        self.used += own_prompt + context - prompt + 1
        slot.own_prompt = own_prompt
        slot.prefill_left = context - cached
        slot.computed = cached
        self.trim(room)

    def admit_planned(self, slot: Slot, context: i64) -> None:
        """`admit` of a plan ahead's admission (`admission_plan`), whose slot the plan has set to prefill after the
        cached prompt: with no released context cached, what `admit` finds there is the plan's."""
        rollout = slot.rollout
        prompt = rollout.prompt_tokens
        self.cached_prefill_tokens += slot.computed
        if self.sharing:
            shared = self._entry(rollout)
            # The plan found its group's prompt cached or not, as here (nothing leaves while a run's admissions book).
            held = shared.holders > 0
            # `planned_cached_tokens`: the prompt, but the last context token (a comparison: every admission asks).
            assert slot.computed == ((prompt if prompt < context - 1 else context - 1) if held else 0), (
                "a planned admission prefills otherwise")
            self._hold(rollout.group, prompt, shared)
            slot.prompt = shared
            slot.own_prompt = 0
            self.used += context - prompt + 1
        else:
            assert not slot.computed, "a planned admission prefills otherwise"
            slot.own_prompt = prompt
            self.used += context + 1

    def drop(self, slot: Slot, tokens: i64) -> None:
        """The slot's sequence leaves holding a context of `tokens` (its reservation while it prefills): free its
        KV, and its group's prompt when it was the group's last here."""
        rollout = slot.rollout
        self.used -= slot.own_prompt + tokens - rollout.prompt_tokens
        self._release_prompt(slot)

    def release(self, slot: Slot) -> None:
        """The slot's trajectory leaves for its tool calls: its KV becomes an evictable entry, but for the turn's last
        token, whose KV was never written."""
        rollout = slot.rollout
        own = slot.own_prompt + rollout.context_tokens - rollout.prompt_tokens
        self.used -= own
        last = self._release_prompt(slot)
        entry = own - 1 + (rollout.prompt_tokens if last else 0)
        self._released[rollout] = (entry, last or not self.sharing)
        self._released_tokens += entry

    def trim(self, room: i64) -> None:
        """Evict released contexts, least recently released first, until `room` more tokens fit."""
        released = self._released
        while released and self.used + room + self._released_tokens > self.capacity:
            _, (tokens, _) = released.popitem(last=False)
            self._released_tokens -= tokens

    def _entry(self, rollout: Rollout) -> SharedPrompt:
        """The entry of the rollout's group in this ledger's index of prompts (idle when none of its sequences holds
        it here, a new one when the index has none), remembered on the rollout: most admissions are a preempted
        sequence's readmission where it ran, which then finds it without a lookup."""
        entry = rollout.shared_prompt
        if entry is not None and entry.ledger is self and entry.indexed:
            return entry
        group = rollout.group
        entry = self._prompts.get(group)
        if entry is None:
            entry = self._prompts[group] = SharedPrompt(rollout.prompt_tokens, self)
            self._idle_prompts += 1
        rollout.shared_prompt = entry
        return entry

    def _hold(self, group: int, prompt: int, entry: SharedPrompt) -> None:
        """One more running sequence of `group` holds its prompt of `prompt` tokens, in the group's `entry` here
        (held, or idle: its prompt cached again). A held prompt of another length is refused."""
        if entry.holders:
            if entry.tokens != prompt:
                raise ValueError(f"rollouts of group {group} have prompts of {entry.tokens} and {prompt} tokens: a "
                                 f"group shares one prompt")
            entry.holders += 1
            return
        entry.tokens = prompt
        self._idle_prompts -= 1
        entry.holders = 1
        self.used += prompt

    def _release_prompt(self, slot: Slot) -> bool:
        """One fewer running sequence of the slot's group; frees the shared prompt when it was the last. Whether it
        was."""
        shared = slot.prompt
        if shared is None:  # no prefix sharing
            return False
        shared.holders -= 1
        if shared.holders:
            return False
        self.used -= shared.tokens
        self._idle_prompts += 1
        if self._idle_prompts > IDLE_PROMPTS_KEPT and 2 * self._idle_prompts > len(self._prompts):
            kept: dict[int, SharedPrompt] = {}
            for group, entry in self._prompts.items():
                if entry.holders:
                    kept[group] = entry
                else:
                    entry.indexed = False  # the rollouts that point to it find their group's entry afresh
            self._prompts = kept
            self._idle_prompts = 0
        return True


def planned_cached_tokens(context: i64, reserved: i64) -> i64:
    """The tokens an admission of a `context`-token rollout planned to reserve `reserved` KV tokens
    (`KVLedger.admission_plan`) finds cached: its group's prompt, which the reservation leaves out of its context and
    first token, but the last context token, which vLLM recomputes to sample from its logits (as `KVLedger.admit`)."""
    cached = context + 1 - reserved
    return cached if cached < context - 1 else context - 1
