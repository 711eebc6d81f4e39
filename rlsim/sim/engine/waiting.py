"""An engine's queue of rollouts waiting for admission."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator

from rlsim.sim.sequence import Rollout

# Admitted heads a queue's list keeps before the queue cuts them off (then only once they are half of it or more):
# cutting them costs a copy of the rest, so it is done seldom, and what they hold on to is bounded.
ADMITTED_KEPT = 64


class WaitingQueue:
    """The rollouts waiting for admission at an engine, head first, with a deque's methods: a list and the index of
    its head, so that the head leaving (an admission) and a preempted sequence going back in front of it (vLLM's
    recompute preemption) move the index. Compiled, each is a few machine instructions where a deque's were a call
    through the Python API: a ×4-length step admits ~50,000 times, and its preemption chains and prefill runs read
    the queue's heads by position."""

    __slots__ = ("_items", "_head")

    def __init__(self) -> None:
        self._items: list[Rollout] = []  # [_head:] wait; the entries before it were admitted (or were returned ones')
        self._head = 0

    def __len__(self) -> int:
        return len(self._items) - self._head

    def __bool__(self) -> bool:
        return len(self._items) > self._head

    def __getitem__(self, index: int) -> Rollout:
        """The rollout `index` places behind the head (negative: from the back)."""
        count = len(self._items) - self._head
        at = index + count if index < 0 else index
        if at < 0 or at >= count:
            raise IndexError(f"queue index {index} out of range for {count} waiting")
        return self._items[self._head + at]

    def __iter__(self) -> Iterator[Rollout]:
        return iter(self._items[self._head:])

    def append(self, rollout: Rollout) -> None:
        """Queue at the back."""
        self._items.append(rollout)

    def appendleft(self, rollout: Rollout) -> None:
        """Queue in front of the head."""
        head = self._head
        if head:
            head -= 1
            self._items[head] = rollout
            self._head = head
        else:
            self._items.insert(0, rollout)

    def insert_ranked(self, rollout: Rollout, rank_of: Callable[[Rollout], float]) -> None:
        """Queue behind every waiting rollout of a lower or equal rank, ahead of those of a higher one (a ranked
        queue's `bisect.insort_right`)."""
        items = self._items
        items.insert(bisect_right(items, rank_of(rollout), lo=self._head, key=rank_of), rollout)

    def popleft(self) -> Rollout:
        """Take the head."""
        items, head = self._items, self._head
        if head >= len(items):
            raise IndexError("the queue is empty")
        rollout = items[head]
        self._head = head + 1
        self._cut()
        return rollout

    def pop(self) -> Rollout:
        """Take the last."""
        items = self._items
        if self._head >= len(items):
            raise IndexError("the queue is empty")
        rollout = items.pop()
        self._cut()
        return rollout

    def _cut(self) -> None:
        """Cut the admitted heads off the list when nothing waits behind them, or when they are more than
        ADMITTED_KEPT and at least half of it."""
        items, head = self._items, self._head
        if head == len(items):
            items.clear()
            self._head = 0
        elif head >= ADMITTED_KEPT and 2 * head >= len(items):
            del items[:head]
            self._head = 0

    def clear(self) -> None:
        self._items.clear()
        self._head = 0
