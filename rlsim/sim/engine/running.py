"""The sequences an engine runs, in admission order."""
from __future__ import annotations

from rlsim.sim.engine.slot import Slot

# Places emptied in the middle (sequences that finished while later ones ran on) are dropped once they outnumber the
# sequences running by this many: often enough to keep the list near its size, seldom enough to cost nothing a leave.
EMPTIED_KEPT = 32


class RunningSlots:
    """The slots of the sequences an engine runs, in admission order: what a dict keyed by rollout kept, without a
    hash a sequence. An admission appends its slot, which remembers its place (`Slot.running_at`); a sequence leaving
    empties its place, and the places emptied at the end are dropped at once, so the latest admitted (a preemption's
    victim) is always the list's last. A ×4-length step admits ~50,000 times, a readmission after each preemption,
    and a dict paid ~300 instructions an insertion and ~200 a deletion for it.

    `slots` is the list itself, read by the preemption chain's plan from its end (its places None where emptied)."""

    __slots__ = ("slots", "_count")

    def __init__(self) -> None:
        self.slots: list[Slot | None] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def add(self, slot: Slot) -> None:
        """The slot's sequence was admitted (or runs here again): it is the latest."""
        assert slot.running_at < 0, "a slot admitted twice"
        slots = self.slots
        slot.running_at = len(slots)
        slots.append(slot)
        self._count += 1

    def remove(self, slot: Slot) -> None:
        """The slot's sequence leaves (finished, preempted, evicted, or gone to its tools or another engine)."""
        at = slot.running_at
        slots = self.slots
        assert 0 <= at < len(slots) and slots[at] is slot, "a slot that does not run here"
        slot.running_at = -1
        self._count -= 1
        if at == len(slots) - 1:
            slots.pop()
            while slots and slots[len(slots) - 1] is None:
                slots.pop()
        else:
            slots[at] = None
            if len(slots) - self._count > self._count + EMPTIED_KEPT:
                self._drop_emptied()

    def latest(self) -> Slot:
        """The slot admitted last (there is one)."""
        slot = self.slots[len(self.slots) - 1]
        assert slot is not None
        return slot

    def in_admission_order(self) -> list[Slot]:
        """The slots, first admitted first."""
        return [slot for slot in self.slots if slot is not None]

    def _drop_emptied(self) -> None:
        kept = self.in_admission_order()
        for at, slot in enumerate(kept):
            slot.running_at = at
        self.slots = list[Slot | None](kept)
