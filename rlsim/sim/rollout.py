"""Rollout engines: one SimPy process per engine (a TP/EP group of GPUs), batching sequences as vLLM V1 does.

An iteration runs every running sequence one step: each decoding sequence produces one token, and sequences being
prefilled get a chunk of their context out of a token budget (`max_num_batched_tokens`) shared with the decodes
(chunked prefill; the last chunk samples the sequence's first token). Between two iterations, at a *boundary*, the
engine

1. honours a pause: drain (stop admitting, let the running sequences finish), interrupt (send every running
   sequence back to the front of the queue with the tokens it generated, its KV cache dropped and recomputed when it
   is readmitted: AReaL's interruptible generation) or hold (stop with the running sequences and their KV cache kept,
   to continue under the new weights: NeMo-RL's and PipelineRL's in-flight weight updates);
2. makes room in the KV cache for the tokens the next iteration writes, by preempting the most recently admitted
   sequence until they fit (vLLM's recompute preemption: the sequence returns to the front of the queue and
   re-prefills its prompt and generated tokens when readmitted);
3. admits waiting sequences first come, first served while a sequence slot (`max_num_seqs`), the token budget and
   the KV cache allow; none in a boundary that had to preempt (vLLM does the same).

KV accounting, in tokens: a running sequence holds its prompt and every token it generated; admission reserves the
context it will hold after its prefill (prompt + generated + 1) up front, so prefilling never overflows the cache
and only decoding grows it. With prefix sharing, a GRPO group's prompt is held once per engine while any sequence of
the group runs there, and a sequence whose group's prompt is there prefills only its own tokens.

Multi-turn trajectories (`MultiTurnRollout`). When a trajectory's turn ends with tool calls it leaves the decode
batch for the calls' latency; the engine's tool-wait policy decides whether it holds its sequence slot and KV cache
meanwhile (`hold`: on return only the appended tool tokens, and the turn's last token, are prefilled) or frees them
(`release`: its KV becomes an evictable prefix-cache entry, reclaimed least recently released first whenever room is
needed; on return it queues again, and prefills whatever of its context is no longer cached). A tool return wakes the
engine like a submit. The cache holds only released trajectories (and their group's prompt when they held it last).

Fast advance. Between batch-changing events (an admission or prefill chunk, a finish, a preemption, a wake-up by a
submit or a pause) the engine only decodes a fixed batch, so it computes in closed form how many iterations run until
the first of its sequences finishes or the KV cache fills, and sleeps once for all of them. A wake-up lets the
iteration in flight complete and books the progress. Every sequence's progress is derived from the engine's
iteration counter, so booking is O(1) and a finish O(log batch): events scale with sequences, never with tokens.
`mode="exact"` steps one iteration per event instead, the reference the fast mode must agree with.

Samples. The engine records its state (`rlsim.events.EngineSample`: running, waiting, KV tokens, decode batch, and
cumulative iterations and KV tokens read by decoding) at every boundary where its batch changed — admission, prefill
iteration, finish, tool call or return, preemption, interruption, pause, resume — and whenever its queue changes
(submit, steal, a tool return that queues). Both modes record the same samples: a sample inside a fast decode stretch
books the iterations completed by then, as the exact mode has, and a boundary where nothing changed (every
iteration of the exact mode) records none.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal, Protocol

import simpy

from rlsim.costs.rollout import PrefillChunk
from rlsim.events import EngineSample
from rlsim.registry import TOOL_WAITS, Registry
from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import Rollout
from rlsim.workload.multiturn import Turn


class IterationCosts(Protocol):
    """What an engine needs from its cost model; `rlsim.costs.rollout.EngineCosts` provides it."""

    def iteration_seconds(
        self, decode_batch: int = 0, decode_context: float = 0, prefill: Iterable[PrefillChunk] = ()
    ) -> float: ...

    def decode_iteration_seconds(self, batch: int, total_context: float) -> float: ...

    def decode_k_iterations_seconds(self, batch: int, total_context: float, k: int) -> float: ...

    def decode_iterations_within(self, batch: int, total_context: float, seconds: float) -> int: ...


PauseMode = Literal["drain", "interrupt", "hold"]
_PAUSE_URGENCY: dict[PauseMode, int] = {"drain": 0, "hold": 1, "interrupt": 2}  # how soon each stops the running sequences

Probe = Callable[[str, Rollout], None]
"""Observes an engine without changing it: called with "admitted", "prefilled" (first token sampled), "preempted",
"interrupted", "tool_call", "tool_returned" or "finished" and the rollout concerned, at the simulated time of the
event."""


@dataclass(eq=False)
class MultiTurnRollout(Rollout):
    """A trajectory of generation turns separated by tool calls. `target_tokens` counts the tokens of all its turns;
    `remaining` those left in the current turn."""

    turns: tuple[Turn, ...] = ()
    turn: int = 0  # the turn being generated (or whose tool calls are running)
    appended: int = 0  # tool-response tokens appended to its context so far
    in_tool: bool = False  # its tool calls are running

    def __post_init__(self) -> None:
        self._turn_ends = tuple(accumulate(t.tokens for t in self.turns))
        if not self.turns or self._turn_ends[-1] != self.target_tokens:
            raise ValueError(f"rollout {self.seq_id}: its turns generate {sum(t.tokens for t in self.turns)} tokens, "
                             f"not its target of {self.target_tokens}")

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.appended + self.generated

    @property
    def remaining(self) -> int:
        return self._turn_ends[self.turn] - self.generated

    @property
    def peak_context_tokens(self) -> int:
        return self.prompt_tokens + self.target_tokens + sum(t.tool_tokens for t in self.turns)


def _peak_context(rollout: Rollout) -> int:
    """The most KV-cache tokens the rollout ever holds: its context when it ends."""
    if isinstance(rollout, MultiTurnRollout):
        return rollout.peak_context_tokens
    return rollout.prompt_tokens + rollout.target_tokens


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


class _Slot:
    """A running sequence's place in its engine."""

    __slots__ = ("rollout", "order", "own_prompt", "prefill_left", "computed", "start_iteration", "start_generated",
                 "live", "tool")

    def __init__(self, rollout: Rollout, order: int, own_prompt: int, prefill_left: int, computed: int):
        self.rollout = rollout
        self.order = order  # admission order: the preemption victim is the latest, finishes tie-break by it
        self.own_prompt = own_prompt  # prompt tokens in its own KV (0 when its group's prompt is shared)
        self.prefill_left = prefill_left  # tokens still to prefill; 0 once it decodes
        self.computed = computed  # tokens in its KV cache before its next prefill chunk
        self.start_iteration = 0  # engine iteration at which it started decoding
        self.start_generated = 0  # its generated tokens then
        self.live = True  # False once it left the engine (its entry in the finish heap is then stale)
        self.tool = False  # holding its slot while its tool calls run


class RolloutEngine:
    """A generation engine over GPUs [first_gpu, first_gpu + gpu_count): a SimPy process batching the rollouts
    submitted to it, with a KV cache of `kv_capacity_tokens` tokens.

    `on_finish(rollout)` is called when a rollout reaches its target. `on_queue_empty(engine)`, when set (work
    stealing), is called when the engine could take queued work from elsewhere: its queue is empty after a finish or
    while nothing runs. Load figures count the iterations completed so far, in either mode; a running rollout's
    `generated` is brought up to date when it finishes or is preempted.
    """

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        costs: IterationCosts,
        kv_capacity_tokens: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        first_gpu: int,
        gpu_count: int,
        recorder: Recorder,
        on_finish: Callable[[Rollout], None],
        mode: Literal["fast", "exact"] = "fast",
        prefix_sharing: bool = True,
        probe: Probe | None = None,
        tool_wait: str = "hold",
        busy_labels: tuple[str, str, str] = ("prefill", "decode", "gen"),
        unit: str | None = None,
    ):
        if mode not in ("fast", "exact"):
            raise ValueError(f"mode must be 'fast' or 'exact', got {mode!r}")
        if kv_capacity_tokens < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(
                f"engine {index}: kv_capacity_tokens, max_num_seqs and max_num_batched_tokens must be >= 1, got "
                f"{kv_capacity_tokens}, {max_num_seqs}, {max_num_batched_tokens}"
            )
        self.env = env
        self.index = index
        self.costs = costs
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.first_gpu = first_gpu
        self.gpu_count = gpu_count
        self.recorder = recorder
        self.on_finish = on_finish
        self.on_queue_empty: Callable[[RolloutEngine], None] | None = None
        self.mode = mode
        self.prefix_sharing = prefix_sharing
        self.probe = probe
        self.tool_wait = TOOL_WAIT_POLICIES[tool_wait]
        # What its busy time is called: (prefill label, decode label, stage). A judge pool generating verdicts is
        # reward work, not rollout.
        self._prefill_label, self._decode_label, self._stage = busy_labels

        self.version = 0  # policy version of the weights it holds
        self.preemptions = 0  # sequences preempted because the KV cache was full
        self.interruptions = 0  # sequences sent back to the queue by pause("interrupt")
        self.tool_calls = 0  # turns that ended in tool calls
        self.cached_prefill_tokens = 0  # context tokens admissions found in the KV cache instead of prefilling
        self._kv_used = 0  # booked: as of the last batch-changing event
        self.queued_tokens = 0  # context tokens of the waiting sequences (what admitting them would cache)

        self._waiting: deque[Rollout] = deque()
        self._running: dict[Rollout, _Slot] = {}  # in admission order
        self._prefilling: list[_Slot] = []  # running sequences not yet prefilled, in admission order
        self._finishes: list[tuple[int, int, _Slot]] = []  # heap of (finish iteration, admission order, slot)
        self._groups: dict[int, list[int]] = {}  # group -> [its running sequences, prompt tokens] (sharing)
        # Released trajectories' KV, evictable, least recently released first: rollout -> (tokens, holds the prompt).
        self._cache: OrderedDict[Rollout, tuple[int, bool]] = OrderedDict()
        self._cached = 0  # tokens in _cache
        self._holding = 0  # slots held by trajectories waiting for tools
        self._returns: list[tuple[_Slot, int]] = []  # held trajectories whose tools returned: (slot, tokens appended)
        self._iteration = 0  # iterations run so far: a decoding sequence gains one token per iteration
        self._decode_iterations = 0  # of which decode-only
        self._decode_read = 0  # KV tokens the decode-only iterations read: per iteration, _context + _decoding
        self._changed = True  # the batch changed since the last sample: the next boundary records one
        self._decoding = 0  # decode batch size
        self._context = 0  # KV tokens the decode batch attends to: sum of prompt + generated - 1
        self._admissions = 0
        self._finished_since_boundary = False
        self._predicted: dict[Rollout, float] = {}
        self._predicted_total = 0.0  # predicted lengths of the outstanding rollouts
        self._generated_total = 0  # tokens they generated (booked)

        self._pause: simpy.Event | None = None  # requested pause, fired once paused
        self._pause_mode: PauseMode = "drain"
        self._resume: simpy.Event | None = None  # set while paused
        self._idle: simpy.Event | None = None  # set while waiting for work
        self._interruptible = False  # sleeping through a decode stretch that a wake-up may cut short
        self._stretch: tuple[float, int, int, int] | None = None  # fast decode under way: start, batch, context, k
        self._live: tuple[float, object, int] = (-1.0, None, 0)  # (time, stretch, its iterations done by then)

        self._unit = unit if unit is not None else f"engine{index}"  # what its spans and samples are called
        self._samples = recorder.engine_samples  # where its samples go
        self._span: tuple[str, float, int] | None = None  # open busy span: label, start, step
        self._span_end = 0.0
        self._in_flight: tuple[str, float] | None = None  # the iteration or decode stretch under way: label, start
        self._recorded_until = 0.0  # close() recorded busy time up to here
        self.process = env.process(self._run())

    # ---- what the controller and balancers use ----------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Rollouts submitted and not finished: waiting plus running."""
        return len(self._waiting) + len(self._running)

    @property
    def queued(self) -> int:
        """Rollouts waiting for admission."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def kv_used_tokens(self) -> int:
        """KV-cache tokens in use after the iterations completed so far."""
        return self._kv_used + self._decoding * self._iterations_unbooked()

    @property
    def predicted_work(self) -> float:
        """Predicted tokens still to generate: predicted lengths of the outstanding rollouts less what they generated
        (an underestimate once sequences outrun their predictions)."""
        return self._predicted_total - self._generated_total - self._decoding * self._iterations_unbooked()

    @property
    def paused(self) -> bool:
        return self._resume is not None

    def submit(self, rollout: Rollout, predicted_tokens: float | None = None) -> None:
        """Queue `rollout` (first come, first served); `predicted_tokens`: its predicted length for length-aware
        balancing (None: its true target)."""
        if rollout.done:
            raise ValueError(f"rollout {rollout.seq_id} already has its {rollout.target_tokens} tokens")
        if _peak_context(rollout) > self.kv_capacity_tokens:
            raise ValueError(
                f"rollout {rollout.seq_id} needs {_peak_context(rollout)} KV tokens, more than "
                f"engine {self.index}'s whole cache of {self.kv_capacity_tokens}"
            )
        rollout.engine = self.index
        self._waiting.append(rollout)
        self._enqueued(rollout, rollout.target_tokens if predicted_tokens is None else predicted_tokens)
        self._sample()
        if self._idle is not None or (len(self._waiting) == 1 and self._interruptible and self._admissible(rollout)):
            self._wake()

    def steal(self, n: int) -> list[Rollout]:
        """Take up to n rollouts that have not started from the back of the queue (work stealing), in queue order."""
        taken: list[Rollout] = []
        while len(taken) < n and self._waiting and self._waiting[-1].generated == 0:
            rollout = self._waiting.pop()
            self.queued_tokens -= rollout.context_tokens
            self._predicted_total -= self._predicted.pop(rollout)
            taken.append(rollout)
        taken.reverse()
        if taken:
            self._sample()
        return taken

    def pause(self, how: PauseMode) -> simpy.Event:
        """Stop admitting and pause: `drain` once the running sequences finish; `interrupt` at the next iteration
        boundary, sending them back to the front of the queue to be recomputed; `hold` at the next iteration
        boundary, keeping them and their KV cache to continue after resume (in-flight weight updates). The event
        fires once the engine is paused. A pause that stops sooner overrides one under way."""
        if self._resume is not None:
            return self.env.event().succeed()
        if self._pause is None:
            self._pause = self.env.event()
            self._pause_mode = how
        elif _PAUSE_URGENCY[how] > _PAUSE_URGENCY[self._pause_mode]:
            self._pause_mode = how
        if how != "drain" or self._idle is not None:
            self._wake()
        return self._pause

    def resume(self, version: int) -> None:
        """Continue with weights of policy `version`."""
        if self._resume is None:
            raise RuntimeError(f"engine {self.index} is not paused")
        self.version = version
        event, self._resume = self._resume, None
        event.succeed()

    def close(self) -> None:
        """The run stops now: record the busy span still open, with the work in flight up to now, and bring the
        running rollouts' `generated` up to date."""
        iteration = self._iteration + self._iterations_unbooked()
        for slot in self._running.values():
            if not slot.prefill_left and not slot.tool:
                slot.rollout.generated = slot.start_generated + iteration - slot.start_iteration
        if self._in_flight is not None:
            label, start = self._in_flight
            self._record(start, label)
        self._flush()
        self._recorded_until = self.env.now
        self._sample()

    def _flush(self) -> None:
        if self._span is not None:
            label, start, step = self._span
            self.recorder.busy(self.first_gpu, self.gpu_count, start, self._span_end, label, self._stage,
                               unit=self._unit, step=step, version=self.version)
            self._span = None

    # ---- the engine process -----------------------------------------------------------------------------------

    def _run(self) -> Generator[simpy.Event, object, None]:
        while True:
            preempted = self._make_room()
            if self._pause is not None and (not self._running or self._pause_mode == "hold"):
                self._sample()
                yield from self._paused()
                self._changed = True  # resumed
                continue
            if (self.on_queue_empty is not None and not self._waiting and self._pause is None
                    and (self._finished_since_boundary or not self._running)):
                self.on_queue_empty(self)
            self._finished_since_boundary = False
            plan = self._schedule(admit=self._pause is None and (not preempted or not self._running))
            if self._changed:
                self._sample()
            if plan:
                yield from self._prefill_iteration(plan)
            elif self._decoding:
                # A boundary that preempted admitted nothing; the next may (a trajectory preempted in its tool call
                # leaves the queue's head free to go), so step one iteration to reach it, as the exact mode does.
                # If the head will not fit then, it will not before the batch changes either: the cache only grows.
                step_one = self.mode == "exact" or (preempted and bool(self._waiting)
                                                    and self._admissible(self._waiting[0], growth=self._decoding))
                yield from self._decode_exact() if step_one else self._decode_fast()
            else:
                # Waiting rollouts may be blocked only by a pause, or by slots and KV held through tool calls.
                assert not self._waiting or self._pause is not None or self._holding, (
                    f"engine {self.index} idles with {len(self._waiting)} rollouts waiting")
                self._flush()
                self._idle = self.env.event()
                yield self._idle
                self._idle = None

    def _paused(self) -> Generator[simpy.Event, object, None]:
        self._flush()
        resume = self._resume = self.env.event()
        event, self._pause = self._pause, None
        assert event is not None
        event.succeed()
        yield resume

    def _make_room(self) -> bool:
        """Boundary work before scheduling: held trajectories back from their tools resume; an interrupting pause
        empties the engine; otherwise preempt the latest admitted sequences until the next iteration's tokens fit in
        the KV cache. Whether anything was preempted."""
        self._resume_held()
        if self._pause is not None and self._pause_mode == "interrupt" and self._running:
            for slot in reversed(list(self._running.values())):
                self._evict(slot)
                self.interruptions += 1
                self._observe("interrupted", slot.rollout)
            self._finishes.clear()  # every entry is stale now
            return False
        self._trim_cache(self._decoding)
        preempted = False
        # A held trajectory back from its tools reserves room for its new tokens unchecked, so even with nothing
        # decoding the cache can be over-full.
        while self._running and self._kv_used + self._decoding > self.kv_capacity_tokens:
            slot = next(reversed(self._running.values()))
            self._evict(slot)
            slot.rollout.preemptions += 1
            self.preemptions += 1
            self._observe("preempted", slot.rollout)
            preempted = True
        return preempted

    def _schedule(self, admit: bool) -> list[tuple[_Slot, int]]:
        """Prefill chunks of the next iteration: the running prefills first, then admissions while allowed."""
        budget = self.max_num_batched_tokens - self._decoding
        plan: list[tuple[_Slot, int]] = []
        for slot in self._prefilling:
            if budget <= 0:
                break
            tokens = min(slot.prefill_left, budget)
            plan.append((slot, tokens))
            budget -= tokens
        while admit and budget > 0 and self._waiting and self._admissible(self._waiting[0]):
            slot = self._admit(self._waiting.popleft())
            tokens = min(slot.prefill_left, budget)
            plan.append((slot, tokens))
            budget -= tokens
        return plan

    def _admissible(self, rollout: Rollout, growth: int = 0) -> bool:
        """A free slot, and room in the KV cache for its context after the decodes of the next iteration; `growth`:
        at the boundary after the cache has grown by that many more tokens."""
        shared = self.prefix_sharing and rollout.group in self._groups
        need = rollout.context_tokens - rollout.prompt_tokens + 1 + (0 if shared else rollout.prompt_tokens)
        return (len(self._running) < self.max_num_seqs
                and self._kv_used + growth + self._decoding + need <= self.kv_capacity_tokens
                and self._decoding < self.max_num_batched_tokens)

    def _admit(self, rollout: Rollout) -> _Slot:
        context = rollout.context_tokens
        self.queued_tokens -= context
        shared = self.prefix_sharing and rollout.group in self._groups
        entry = self._cache.pop(rollout, None)
        tokens, with_prompt = entry if entry is not None else (0, False)
        self._cached -= tokens
        # The cached prefix: the group's prompt (held by its running samples, or revived from this trajectory's
        # entry), then the trajectory's own released context — usable only behind its prompt.
        if not self.prefix_sharing:
            prefix = tokens
        elif shared or with_prompt:
            prefix = rollout.prompt_tokens + tokens - (rollout.prompt_tokens if with_prompt else 0)
        else:
            prefix = 0
        # vLLM recomputes at least the last token of a cached prefix, to sample from its logits.
        cached = min(prefix, context - 1)
        self.cached_prefill_tokens += cached
        own_prompt = 0 if self.prefix_sharing else rollout.prompt_tokens
        if shared:
            holders = self._groups[rollout.group]
            if holders[1] != rollout.prompt_tokens:
                raise ValueError(f"rollouts of group {rollout.group} have prompts of {holders[1]} and "
                                 f"{rollout.prompt_tokens} tokens: a group shares one prompt")
            holders[0] += 1
        elif self.prefix_sharing:
            self._groups[rollout.group] = [1, rollout.prompt_tokens]
            self._kv_used += rollout.prompt_tokens
        self._kv_used += own_prompt + context - rollout.prompt_tokens + 1
        slot = _Slot(rollout, self._admissions, own_prompt, context - cached, cached)
        self._admissions += 1
        if rollout.admitted < 0:
            rollout.admitted = self.env.now
        rollout.admissions += 1
        self._changed = True
        self._running[rollout] = slot
        self._prefilling.append(slot)
        self._trim_cache(self._decoding)
        self._observe("admitted", rollout)
        return slot

    def _resume_held(self) -> None:
        """Trajectories that held their slot through tool calls continue: their cache holds the context up to the
        turn's last token, whose KV was never written, so they prefill that token and the tool responses (reserving
        room for them, and for the next turn's first token, unchecked: `_make_room` preempts if that overfills)."""
        if self._returns:
            self._changed = True
        for slot, tokens in self._returns:
            rollout = slot.rollout
            assert isinstance(rollout, MultiTurnRollout)
            before = rollout.context_tokens
            rollout.turn += 1
            rollout.appended += tokens
            slot.tool = False
            self._holding -= 1
            slot.prefill_left = tokens + 1
            slot.computed = before - 1
            self._kv_used += tokens + 1
            self._prefilling.append(slot)
        self._returns.clear()

    def _trim_cache(self, room: int) -> None:
        """Evict released trajectories' KV, least recently released first, until `room` more tokens fit."""
        while self._cache and self._kv_used + room + self._cached > self.kv_capacity_tokens:
            _, (tokens, _) = self._cache.popitem(last=False)
            self._cached -= tokens

    def _prefill_iteration(self, plan: list[tuple[_Slot, int]]) -> Generator[simpy.Event, object, None]:
        """One iteration mixing the decode batch with prefill chunks."""
        chunks = [PrefillChunk(tokens, slot.computed, tokens == slot.prefill_left) for slot, tokens in plan]
        start = self.env.now
        self._in_flight = (self._prefill_label, start)
        yield self.env.timeout(self.costs.iteration_seconds(self._decoding, self._context, chunks))
        self._in_flight = None
        self._advance(1)
        self._changed = True
        self._record(start, self._prefill_label)
        for slot, tokens in plan:
            slot.computed += tokens
            slot.prefill_left -= tokens
        self._finish_due()
        prefilled = [slot for slot, _ in plan if not slot.prefill_left]
        if prefilled:
            self._prefilling = [slot for slot in self._prefilling if slot.prefill_left]
            for slot in prefilled:
                self._first_token(slot)

    def _decode_exact(self) -> Generator[simpy.Event, object, None]:
        start = self.env.now
        self._in_flight = (self._decode_label, start)
        # One iteration of the closed form (the iteration time to rounding, from the batch's cached profile) rather
        # than re-pricing its kernels: after a preemption the fast mode steps here once per iteration, tens of
        # thousands of times in a long-tail step.
        yield self.env.timeout(self.costs.decode_k_iterations_seconds(self._decoding, self._context, 1))
        self._in_flight = None
        self._advance(1, decode=True)
        self._record(start, self._decode_label)
        self._finish_due()

    def _decode_fast(self) -> Generator[simpy.Event, object, None]:
        """Decode the fixed batch until its first finish or a full KV cache, in one event unless woken earlier."""
        costs, batch, context, start = self.costs, self._decoding, self._context, self.env.now
        k = min(self._next_finish() - self._iteration, (self.kv_capacity_tokens - self._kv_used) // batch)
        seconds = costs.decode_k_iterations_seconds(batch, context, k)
        self._stretch = (start, batch, context, k)
        self._in_flight = (self._decode_label, start)
        self._interruptible = True
        try:
            yield self.env.timeout(seconds)
            self._interruptible = False
        except simpy.Interrupt:
            elapsed = self.env.now - start
            done = min(costs.decode_iterations_within(batch, context, elapsed), k)
            if done < k and (elapsed == 0 or costs.decode_k_iterations_seconds(batch, context, done) < elapsed):
                # Woken mid-iteration: the iteration in flight completes before anything changes. Woken at the
                # instant the stretch began (a submit right after a resume), the first iteration is in flight, as in
                # the exact mode, which has launched it.
                done += 1
                end = seconds if done == k else costs.decode_k_iterations_seconds(batch, context, done)
                yield self.env.timeout(max(0.0, start + end - self.env.now))
            k = done
        self._stretch = self._in_flight = None
        self._advance(k, decode=True)
        self._record(start, self._decode_label)
        self._finish_due()

    def _iterations_unbooked(self) -> int:
        """Iterations of the fast decode under way completed by now (what the exact mode has booked by now)."""
        stretch = self._stretch
        if stretch is None:
            return 0
        now = self.env.now
        if self._live[0] != now or self._live[1] is not stretch:  # one binary search per stretch and instant
            start, batch, context, k = stretch
            self._live = (now, stretch, min(self.costs.decode_iterations_within(batch, context, now - start), k))
        return self._live[2]

    def _wake(self) -> None:
        if self._idle is not None:
            if not self._idle.triggered:
                self._idle.succeed()
        elif self._interruptible:
            self._interruptible = False  # one interrupt per stretch
            self.process.interrupt()

    # ---- book-keeping, O(1) or O(log batch) per event --------------------------------------------------------

    def _advance(self, iterations: int, decode: bool = False) -> None:
        """Book `iterations` iterations (`decode`: decode-only ones): every decoding sequence gained as many tokens.
        Released contexts that the growth needed room from are evicted now, as the boundaries inside a fast stretch
        would have done."""
        self._iteration += iterations
        if decode:
            self._decode_iterations += iterations
            self._decode_read += _decode_read(self._decoding, self._context, iterations)
        grown = iterations * self._decoding
        self._context += grown
        self._kv_used += grown
        self._generated_total += grown
        self._trim_cache(0)

    def _next_finish(self) -> int:
        heap = self._finishes
        while not heap[0][2].live:
            heapq.heappop(heap)
        return heap[0][0]

    def _finish_due(self) -> None:
        heap = self._finishes
        while heap:
            finish, _, slot = heap[0]
            if slot.live and finish > self._iteration:
                return
            heapq.heappop(heap)
            if slot.live:
                self._turn_end(slot, decoding=True)

    def _first_token(self, slot: _Slot) -> None:
        """The last prefill chunk sampled the sequence's next token: it decodes from now on, or is done."""
        rollout = slot.rollout
        rollout.generated += 1
        self._generated_total += 1
        if rollout.version_started < 0:
            rollout.version_started = self.version  # staleness counts from the oldest token
        self._observe("prefilled", rollout)
        if rollout.remaining <= 0:
            self._turn_end(slot, decoding=False)
            return
        slot.start_iteration = self._iteration
        slot.start_generated = rollout.generated
        self._decoding += 1
        self._context += rollout.context_tokens - 1
        heapq.heappush(self._finishes, (self._iteration + rollout.remaining, slot.order, slot))

    def _turn_end(self, slot: _Slot, decoding: bool) -> None:
        """The sequence generated the last token of its turn: it is done, or its tool calls start."""
        rollout = slot.rollout
        if decoding:
            rollout.generated = slot.start_generated + self._iteration - slot.start_iteration
        if rollout.done:
            self._finish(slot, decoding)
        else:
            assert isinstance(rollout, MultiTurnRollout)
            self._tool_call(slot, rollout, decoding)

    def _finish(self, slot: _Slot, decoding: bool) -> None:
        rollout = slot.rollout
        target = rollout.target_tokens
        del self._running[rollout]
        slot.live = False
        rollout.generated = target
        final = rollout.context_tokens
        if decoding:
            self._decoding -= 1
            self._context -= final - 1
        self._kv_used -= slot.own_prompt + final - rollout.prompt_tokens
        self._release_prompt(rollout)
        rollout.finished = self.env.now
        self._changed = True
        self._generated_total -= target
        self._predicted_total -= self._predicted.pop(rollout)
        self._finished_since_boundary = True
        self._observe("finished", rollout)
        self.on_finish(rollout)

    def _evict(self, slot: _Slot) -> None:
        """Drop a running sequence's KV cache and put it back at the front of the queue, keeping its tokens."""
        rollout = slot.rollout
        del self._running[rollout]
        slot.live = False
        self._changed = True
        own = rollout.context_tokens - rollout.prompt_tokens
        if slot.prefill_left:
            self._prefilling.remove(slot)
            self._kv_used -= slot.own_prompt + own + 1
        elif slot.tool:
            slot.tool = False
            self._holding -= 1
            self._kv_used -= slot.own_prompt + own
        else:
            rollout.generated = slot.start_generated + self._iteration - slot.start_iteration
            self._decoding -= 1
            self._context -= rollout.context_tokens - 1
            self._kv_used -= slot.own_prompt + rollout.context_tokens - rollout.prompt_tokens
        self._release_prompt(rollout)
        if isinstance(rollout, MultiTurnRollout) and rollout.in_tool:
            return  # it queues again when its tools return
        self._waiting.appendleft(rollout)
        self.queued_tokens += rollout.context_tokens

    def _release_prompt(self, rollout: Rollout) -> bool:
        """One fewer running sequence of its group; frees the shared prompt when it was the last. Whether it was."""
        if not self.prefix_sharing:
            return False
        holders = self._groups[rollout.group]
        holders[0] -= 1
        if holders[0]:
            return False
        del self._groups[rollout.group]
        self._kv_used -= holders[1]
        return True

    # ---- multi-turn: tool calls ------------------------------------------------------------------------------

    def _tool_call(self, slot: _Slot, rollout: MultiTurnRollout, decoding: bool) -> None:
        if decoding:
            self._decoding -= 1
            self._context -= rollout.context_tokens - 1
        turn = rollout.turns[rollout.turn]
        rollout.in_tool = True
        self._changed = True
        self.tool_calls += 1
        self._observe("tool_call", rollout)
        if self.tool_wait(self, rollout):
            slot.tool = True
            self._holding += 1
        else:
            del self._running[rollout]
            slot.live = False
            own = slot.own_prompt + rollout.context_tokens - rollout.prompt_tokens
            self._kv_used -= own
            last = self._release_prompt(rollout)
            # Its cache holds its context but the turn's last token, whose KV was never written.
            entry = own - 1 + (rollout.prompt_tokens if last else 0)
            self._cache[rollout] = (entry, last or not self.prefix_sharing)
            self._cached += entry
            self._finished_since_boundary = True
        self.env.process(self._tools_return(rollout, turn.tool_s, turn.tool_tokens))

    def _tools_return(self, rollout: MultiTurnRollout, seconds: float, tokens: int) -> Generator:
        yield self.env.timeout(seconds)
        rollout.in_tool = False
        self._observe("tool_returned", rollout)
        slot = self._running.get(rollout)
        if slot is not None and slot.tool:
            self._returns.append((slot, tokens))  # taken up at the next boundary, like every batch change
            self._wake()
            return
        rollout.turn += 1
        rollout.appended += tokens
        self._waiting.append(rollout)
        self.queued_tokens += rollout.context_tokens
        self._sample()
        if self._idle is not None or (len(self._waiting) == 1 and self._interruptible and self._admissible(rollout)):
            self._wake()

    def _enqueued(self, rollout: Rollout, predicted: float) -> None:
        self.queued_tokens += rollout.context_tokens
        self._predicted[rollout] = predicted
        self._predicted_total += predicted
        self._generated_total += rollout.generated

    def _sample(self) -> None:
        """Record the engine's state now; inside a fast decode stretch, with the iterations completed by now."""
        self._changed = False
        if self._stretch is None:  # at a boundary, or in an iteration whose progress the exact mode books at its end
            self._samples.append(EngineSample(self._unit, self.env.now, len(self._running), len(self._waiting),
                                              self._kv_used, self._decoding, self._iteration, self._decode_iterations,
                                              self._decode_read))
            return
        done = self._iterations_unbooked()
        _, batch, context, _ = self._stretch
        self._samples.append(EngineSample(self._unit, self.env.now, len(self._running), len(self._waiting),
                                          self._kv_used + batch * done, batch, self._iteration + done,
                                          self._decode_iterations + done,
                                          self._decode_read + _decode_read(batch, context, done)))

    def _observe(self, event: str, rollout: Rollout) -> None:
        if self.probe is not None:
            self.probe(event, rollout)

    def _record(self, start: float, label: str) -> None:
        """The engine's GPUs did `label` work from `start` until now; consecutive work of one kind is one span."""
        end = self.env.now
        start = max(start, self._recorded_until)
        if end <= start:
            return
        step = self.recorder.phase.step
        span = self._span
        if span is not None and span[0] == label and span[2] == step and self._span_end == start:
            self._span_end = end
            return
        self._flush()
        self._span = (label, start, step)
        self._span_end = end


def _decode_read(batch: int, context: int, iterations: int) -> int:
    """KV tokens `iterations` decode iterations of a fixed batch read, from a total context of `context` cached tokens:
    iteration i reads every sequence's cache, context + i·batch tokens, and the `batch` tokens it decodes."""
    return iterations * (context + batch) + batch * iterations * (iterations - 1) // 2
