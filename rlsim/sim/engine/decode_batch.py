"""The sequences an engine decodes, and the fast advance over them.

Between batch-changing events the decode batch is fixed: every iteration each of its sequences gains one token and
the batch's context grows by its size. So a sequence's progress is derived from the engine's iteration counter
(booking an iteration is O(1), a finish O(log batch)), and a *stretch* of iterations until the first finish or a
full KV cache is priced in closed form and slept through in one event.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from mypy_extensions import i64

from rlsim.costs.rollout import IterationCosts
from rlsim.sim.engine.slot import Slot

# Later than any iteration a run reaches: an int, not infinity, so that iteration arithmetic stays in integers (as
# a compiler of typed Python, mypyc, requires).
NO_TURN_END: i64 = 1 << 62


class Stretch:
    """A fast decode under way: from `start`, a fixed batch of `size` sequences attending to `context` KV tokens
    decodes `k` iterations in `seconds`, or `iterations` once a wake-up cut it short."""

    __slots__ = ("start", "size", "context", "k", "seconds", "iterations", "at", "done")

    def __init__(self, start: float, size: i64, context: i64, k: i64, seconds: float):
        self.start = start
        self.size = size
        self.context = context
        self.k = k
        self.seconds = seconds
        self.iterations = k
        # Its iterations completed by time `at`: load figures and samples ask several times per instant, and each
        # answer is a binary search.
        self.at = -1.0
        self.done: i64 = 0


class DecodeBatch:
    """The decoding sequences of one engine: their count (`size`), the KV tokens they attend to (`context`: the sum
    of prompt + generated - 1), the iterations run so far, and when each sequence's turn ends. `on_turn_end(slot)` is
    called for a sequence that generated its turn's last token, once it has left the batch."""

    __slots__ = ("costs", "on_turn_end", "size", "context", "iteration", "decode_iterations", "decode_read", "stretch",
                 "_finishes")

    def __init__(self, costs: IterationCosts, on_turn_end: Callable[[Slot], None]):
        self.costs = costs
        self.on_turn_end = on_turn_end
        self.size: i64 = 0
        self.context: i64 = 0
        self.iteration: i64 = 0  # iterations run so far, prefill ones included
        self.decode_iterations: i64 = 0  # of which decode-only
        self.decode_read: i64 = 0  # KV tokens the decode-only iterations read
        self.stretch: Stretch | None = None  # the fast decode under way
        self._finishes: list[Slot] = []  # the decoding slots by when their turn ends (`push_finish`), stale ones too

    def join(self, slot: Slot) -> None:
        """The slot's sequence sampled its first token of the turn and decodes from the next iteration on."""
        rollout = slot.rollout
        slot.start_iteration = self.iteration
        slot.start_generated = rollout.generated
        slot.decoding = True
        self.size += 1
        self.context += rollout.context_tokens - 1
        slot.finish = self.iteration + rollout.remaining
        push_finish(self._finishes, slot)

    def leave(self, slot: Slot) -> None:
        """The slot's sequence leaves the batch (its turn ended, or it is preempted or interrupted), its `generated`
        brought up to date; a finish entry it leaves behind goes stale."""
        rollout = slot.rollout
        rollout.generated = slot.start_generated + self.iteration - slot.start_iteration
        slot.decoding = False
        self.size -= 1
        self.context -= rollout.context_tokens - 1

    def catch_up(self, slots: Iterable[Slot], now: float) -> None:
        """Bring the `generated` of these decoding slots up to date with the iterations completed by `now`."""
        iteration = self.iteration + self.unbooked(now)
        for slot in slots:
            slot.rollout.generated = slot.start_generated + iteration - slot.start_iteration

    def pad(self, rows: int, context: int) -> None:
        """A static batch (`rlsim.sim.static_batch`) replaces the batch: `rows` rows whose padded KV caches hold
        `context` tokens in all decode together, a finished row kept as padding, until the batch leaves whole
        (`pad(0, 0)`). Its rows never join the finish heap."""
        self.size = rows
        self.context = context

    def emptied(self) -> None:
        """Every sequence left at once (an interrupting pause): every finish entry is stale."""
        self._finishes.clear()

    def advance(self, iterations: i64, decode: bool) -> i64:
        """Book `iterations` iterations (`decode`: decode-only ones); the tokens the batch gained."""
        self.iteration += iterations
        if decode:
            self.decode_iterations += iterations
            self.decode_read += decode_read(self.size, self.context, iterations)
        grown = iterations * self.size
        self.context += grown
        return grown

    def finish_due(self) -> None:
        """Sequences whose turn ended by the iteration booked leave the batch, up to date, for `on_turn_end`, by
        iteration and then admission order."""
        heap = self._finishes
        while heap:
            slot = heap[0]
            if slot.live and slot.finish > self.iteration:
                return
            pop_finish(heap)
            if slot.live:
                self.leave(slot)
                self.on_turn_end(slot)

    def first_finish(self) -> i64:
        """The iteration at which the batch's first turn ends (`NO_TURN_END` for an empty batch); stale entries at
        the heap's head are dropped on the way."""
        heap = self._finishes
        while heap and not heap[0].live:
            pop_finish(heap)
        return heap[0].finish if heap else NO_TURN_END

    def pending_finishes(self) -> list[Slot]:
        """A copy of the finish heap, stale entries included, to plan ahead on without touching the batch."""
        return self._finishes.copy()

    def begin_stretch(self, start: float, room: i64) -> Stretch:
        """A fast decode from `start` until the batch's first turn ends or its growth fills `room` KV tokens."""
        heap = self._finishes
        while not heap[0].live:
            pop_finish(heap)
        k = min(heap[0].finish - self.iteration, room // self.size)
        return self.planned_stretch(start, k, self.costs.decode_k_iterations_seconds(self.size, float(self.context), k))

    def planned_stretch(self, start: float, k: i64, seconds: float) -> Stretch:
        """A fast decode from `start` of `k` iterations in `seconds`, as `begin_stretch` or a plan ahead priced it."""
        stretch = self.stretch = Stretch(start, self.size, self.context, k, seconds)
        return stretch

    def cut_short(self, now: float) -> float | None:
        """A wake-up at `now` ends the stretch once the iteration in flight completes: the seconds to wait for it
        (None: none is in flight). Woken at the instant the stretch began (a submit right after a resume), its first
        iteration is in flight, as in the exact mode, which has launched it."""
        stretch, costs = self.stretch, self.costs
        assert stretch is not None
        size, context, elapsed = stretch.size, float(stretch.context), now - stretch.start
        done = min(costs.decode_iterations_within(size, context, elapsed), stretch.k)
        stretch.iterations = done
        if done < stretch.k and (elapsed == 0 or costs.decode_k_iterations_seconds(size, context, done) < elapsed):
            done = stretch.iterations = done + 1
            end = stretch.seconds if done == stretch.k else costs.decode_k_iterations_seconds(size, context, done)
            return max(0.0, stretch.start + end - now)
        return None

    def end_stretch(self) -> i64:
        """The stretch is over: the iterations it ran, to book."""
        stretch = self.stretch
        assert stretch is not None
        self.stretch = None
        return stretch.iterations

    def unbooked(self, now: float) -> i64:
        """Iterations of the stretch under way completed by `now` (what the exact mode has booked by then)."""
        stretch = self.stretch
        if stretch is None:
            return 0
        if stretch.at != now:
            stretch.at = now
            stretch.done = min(self.costs.decode_iterations_within(stretch.size, float(stretch.context),
                                                                          now - stretch.start),
                               stretch.k)
        return stretch.done


def push_finish(heap: list[Slot], slot: Slot) -> None:
    """`heapq.heappush` of `slot` onto a finish heap: slots by (`finish`, `order`), a pair no two slots share (a slot
    is in the heap once: a turn's entry is popped when the turn ends, before the slot can rejoin). heapq over tuples of
    the pair and the slot pops the same slots in the same order, but compares tuples by Python's rich comparison at
    every level; compiled, these compare two native ints read off the slots, and a push builds nothing. The comparison
    is written out at each place rather than called: a helper function costs ~1 % of a step (callgrind)."""
    finish, order = slot.finish, slot.order
    heap.append(slot)
    index: i64 = len(heap) - 1
    while index:
        parent_index = (index - 1) >> 1
        parent = heap[parent_index]
        if parent.finish < finish or (parent.finish == finish and parent.order < order):
            break
        heap[index] = parent
        index = parent_index
    heap[index] = slot


def pop_finish(heap: list[Slot]) -> None:
    """`heapq.heappop` off a finish heap (`push_finish`): the slot at its head leaves it."""
    last = heap.pop()
    size: i64 = len(heap)
    if not size:
        return
    finish, order = last.finish, last.order
    index: i64 = 0
    child: i64 = 1
    while child < size:
        smaller = heap[child]
        right = child + 1
        if right < size:
            other = heap[right]
            if other.finish < smaller.finish or (other.finish == smaller.finish and other.order < smaller.order):
                smaller, child = other, right
        if finish < smaller.finish or (finish == smaller.finish and order < smaller.order):
            break
        heap[index] = smaller
        index, child = child, 2 * child + 1
    heap[index] = last


def decode_read(batch: i64, context: i64, iterations: i64) -> i64:
    """KV tokens `iterations` decode iterations of a fixed batch read, from a total context of `context` cached tokens:
    iteration i reads every sequence's cache, context + i·batch tokens, and the `batch` tokens it decodes."""
    return iterations * (context + batch) + batch * iterations * (iterations - 1) // 2
