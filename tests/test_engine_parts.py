"""The rollout engine's parts alone (rlsim/sim/engine/): the KV ledger's admission, sharing and eviction arithmetic,
the decode batch's bookkeeping and fast-advance stretch, and the pause protocol of the engine's state."""
from __future__ import annotations

import bisect
import dataclasses
import heapq
import random
from collections import deque

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from rlsim.sim.clock import sim_now
from rlsim.sim.engine.decode_batch import DecodeBatch, decode_read, pop_finish, push_finish
from rlsim.sim.engine.kv_ledger import IDLE_PROMPTS_KEPT, KVLedger
from rlsim.sim.engine.running import EMPTIED_KEPT, RunningSlots
from rlsim.sim.engine.slot import SharedPrompt, Slot
from rlsim.sim.engine.state import BUSY, IDLE, PAUSED, EngineState
from rlsim.sim.engine.waiting import ADMITTED_KEPT, WaitingQueue
from rlsim.sim.sequence import MultiTurnRollout, Rollout, SegmentedRollout
from rlsim.workload.multiturn import Turn
from tests.test_sim_rollout import FixedCosts, rollout


def admitted(ledger: KVLedger, r: Rollout, order: int = 0) -> Slot:
    slot = Slot(r, order)
    ledger.admit(slot, 0, r.context_tokens)
    return slot


# ---- waiting queue --------------------------------------------------------------------------------------------------

@given(st.lists(st.sampled_from(["append", "appendleft", "popleft", "pop", "ranked", "clear"]), max_size=400),
       st.integers(0, 2**31))
def test_the_waiting_queue_keeps_a_deques_order_through_admissions_returns_and_steals(operations, seed):
    """Against a deque (a ranked insertion against a list's insort): the same rollouts in the same order after every
    operation, whatever the mix; the admitted heads it keeps stay bounded."""
    chosen = random.Random(seed)
    queue, reference, made = WaitingQueue(), deque(), 0
    for operation in operations:
        if operation in ("append", "appendleft", "ranked"):
            item = rollout(made, 10 + chosen.randrange(50), 5)
            made += 1
            if operation == "ranked":
                queue.insert_ranked(item, _prompt_rank)
                ordered = list(reference)
                bisect.insort_right(ordered, item, key=_prompt_rank)
                reference = deque(ordered)
            else:
                getattr(queue, operation)(item)
                getattr(reference, operation)(item)
        elif operation == "clear":
            queue.clear()
            reference.clear()
        elif reference:
            assert getattr(queue, operation)() is getattr(reference, operation)()
        else:
            with pytest.raises(IndexError):
                getattr(queue, operation)()
        assert list(queue) == list(reference) and len(queue) == len(reference) and bool(queue) == bool(reference)
        assert all(queue[i] is reference[i] for i in range(-len(reference), len(reference)))
        assert queue._head < ADMITTED_KEPT or 2 * queue._head < len(queue._items)  # noqa: SLF001 - bounded
    for index in (len(reference), -len(reference) - 1):
        with pytest.raises(IndexError):
            queue[index]


def _prompt_rank(rollout: Rollout) -> float:
    """A rank to order a queue by in the test above: the rollout's prompt length."""
    return float(rollout.prompt_tokens)


# ---- running sequences ----------------------------------------------------------------------------------------------

@given(st.lists(st.tuples(st.sampled_from(["admit", "leave", "leave_latest", "again"]), st.integers(0, 2**31)),
                max_size=400))
def test_the_running_slots_keep_a_dicts_admission_order_through_leaves_and_readmissions(operations):
    """Against a dict keyed by rollout (what the engine kept): the same slots in the same order after every
    admission, leave from anywhere (a finish), leave of the latest (a preemption) and return of a slot that left (a KV
    fetch's); the latest is the dict's last, the places emptied stay bounded and every slot knows its place."""
    running, reference, left, made = RunningSlots(), {}, [], 0
    for operation, pick in operations:
        if operation == "admit" or (operation == "again" and not left) or (operation != "admit" and not reference):
            slot = Slot(rollout(made, 10, 5), made)
            made += 1
            running.add(slot)
            reference[slot.rollout] = slot
        elif operation == "again":
            slot = left.pop(pick % len(left))
            running.add(slot)
            reference[slot.rollout] = slot
        else:
            slots = list(reference.values())
            slot = slots[-1] if operation == "leave_latest" else slots[pick % len(slots)]
            running.remove(slot)
            del reference[slot.rollout]
            left.append(slot)
        assert running.in_admission_order() == list(reference.values())
        assert len(running) == len(reference) and bool(running) == bool(reference)
        if reference:
            assert running.latest() is list(reference.values())[-1]
        assert all(slot is None or running.slots[slot.running_at] is slot for slot in running.slots)
        assert all(slot.running_at == -1 for slot in left)
        assert len(running.slots) - len(running) <= len(running) + EMPTIED_KEPT


# ---- KV ledger ------------------------------------------------------------------------------------------------------

def test_admission_reserves_the_context_after_prefill_and_a_group_holds_its_prompt_once():
    ledger = KVLedger(capacity=100, sharing=True)
    a, b = rollout(0, 40, 10, group=7), rollout(1, 40, 10, group=7)
    first = admitted(ledger, a)
    assert ledger.used == 40 + 1  # prompt + the first token's slot
    assert (first.prefill_left, first.computed) == (40, 0)
    # The group's prompt is here: the second sample needs only its own first token, and prefills only the last prompt
    # token (to sample from its logits).
    assert ledger.fits(b, room=58) and not ledger.fits(b, room=59)
    second = admitted(ledger, b, 1)
    assert ledger.used == 42
    assert (second.prefill_left, second.computed) == (1, 39)
    assert ledger.cached_prefill_tokens == 39


def test_without_sharing_every_sequence_holds_its_own_prompt():
    ledger = KVLedger(capacity=100, sharing=False)
    a, b = rollout(0, 40, 10, group=7), rollout(1, 40, 10, group=7)
    admitted(ledger, a)
    assert not ledger.fits(b, room=20) and ledger.fits(b, room=18)
    admitted(ledger, b, 1)
    assert ledger.used == 82 and ledger.cached_prefill_tokens == 0


def test_the_shared_prompt_is_freed_with_the_groups_last_sequence():
    ledger = KVLedger(capacity=100, sharing=True)
    a, b = rollout(0, 40, 10, group=7), rollout(1, 40, 10, group=7)
    slots = [admitted(ledger, a), admitted(ledger, b, 1)]
    a.generated = 5
    ledger.used += 4  # its decodes wrote 4 tokens past its first-token reservation
    ledger.drop(slots[0], a.context_tokens)
    assert ledger.used == 42 - 1  # b's first-token reservation and the prompt stay
    ledger.drop(slots[1], b.context_tokens + 1)
    assert ledger.used == 0


def test_a_groups_prompt_is_cached_again_at_its_next_admission_and_the_ledger_forgets_groups_gone():
    """The ledger keeps a group's entry once its last sequence left, for its next admission (a preempted sequence
    readmitted), and forgets such entries once they are more than IDLE_PROMPTS_KEPT and more than the held ones: the
    accounting is that of a fresh entry each time, and a long run's index of prompts stays bounded."""
    ledger = KVLedger(capacity=10**9, sharing=True)
    kept = admitted(ledger, rollout(0, 40, 10, group=0))
    for group in range(1, 3 * IDLE_PROMPTS_KEPT):
        first = admitted(ledger, rollout(group, 30, 10, group=group), group)
        assert ledger.holds_prompt(group) and ledger.used == 41 + 31
        ledger.drop(first, first.rollout.context_tokens + 1)
        assert not ledger.holds_prompt(group) and ledger.used == 41
        # Readmitted with another prompt, as nothing holds the old one: a fresh prefill of it.
        again = admitted(ledger, rollout(group, 20, 10, group=group), group)
        assert (again.prefill_left, again.computed) == (20, 0) and ledger.used == 41 + 21
        ledger.drop(again, again.rollout.context_tokens + 1)
        assert len(ledger._prompts) <= 2 * IDLE_PROMPTS_KEPT + 2  # noqa: SLF001 - the index's size is the point
    assert ledger.holds_prompt(0) and ledger.fits(rollout(1, 40, 10, group=0), room=0)
    ledger.drop(kept, kept.rollout.context_tokens + 1)
    assert ledger.used == 0 and not ledger.holds_prompt(0)


def test_a_rollout_reads_its_groups_prompt_entry_only_where_the_ledger_still_indexes_it():
    """A rollout remembers its group's prompt entry where it waited or ran: another engine's ledger does not read it
    (the rollout moved, by a steal), and once its ledger forgot the entry the rollout finds its group's new one, so a
    group's sequences still share one prompt."""
    here, there = KVLedger(capacity=10**9, sharing=True), KVLedger(capacity=10**9, sharing=True)
    moved, sibling = rollout(0, 40, 10, group=5), rollout(1, 40, 10, group=5)
    kept = admitted(here, sibling)
    assert here.fits(moved, room=0) and here.admission_tokens(moved) == 1  # the prompt is cached here ...
    assert there.admission_tokens(moved) == 41  # ... not there, though the rollout knows here's entry
    slot = admitted(there, moved)
    assert (slot.prefill_left, slot.computed) == (40, 0) and there.used == 41 and there.holds_prompt(5)
    assert here.used == 41 and here.admission_tokens(moved) == 1  # here's entry is as it was
    # Here forgets its idle entries: a rollout that knew one finds its group's next entry, shared with a sibling.
    waiting, (first, second) = rollout(2, 30, 10, group=9), (rollout(3, 30, 10, group=9), rollout(4, 30, 10, group=9))
    assert here.admission_tokens(waiting) == 31  # its group's entry, idle, is now the rollout's
    for group in range(10, 12 + 2 * IDLE_PROMPTS_KEPT):
        other = admitted(here, rollout(group, 20, 10, group=group), group)
        here.drop(other, other.rollout.context_tokens + 1)
    assert not here.holds_prompt(9) and len(here._prompts) < IDLE_PROMPTS_KEPT  # noqa: SLF001 - it forgot them
    admitted(here, first, 1)
    assert here.admission_tokens(waiting) == 1 and here.admission_tokens(second) == 1
    third = admitted(here, waiting, 2)
    assert (third.prefill_left, third.computed) == (1, 29) and third.prompt is first.shared_prompt
    here.drop(kept, sibling.context_tokens + 1)
    assert here.holds_prompt(9) and not here.holds_prompt(5)


def test_a_group_shares_one_prompt():
    ledger = KVLedger(capacity=100, sharing=True)
    admitted(ledger, rollout(0, 40, 10, group=7))
    with pytest.raises(ValueError, match="a group shares one prompt"):
        admitted(ledger, rollout(1, 30, 10, group=7), 1)


def trajectory(seq_id: int, prompt: int, turns: list[Turn], group: int | None = None) -> MultiTurnRollout:
    return MultiTurnRollout(seq_id, seq_id if group is None else group, prompt, sum(t.tokens for t in turns), False,
                            0.0, turns=tuple(turns))


def test_a_released_context_is_found_cached_until_evicted_least_recently_released_first():
    ledger = KVLedger(capacity=100, sharing=True)
    a, b = trajectory(0, 20, [Turn(5, 1.0, 3), Turn(2)]), trajectory(1, 30, [Turn(5, 1.0, 3), Turn(2)])
    slots = [admitted(ledger, a), admitted(ledger, b, 1)]
    a.generated = b.generated = 5
    ledger.used += 8  # their decodes wrote 4 tokens each past the first-token reservation
    ledger.release(slots[0])
    ledger.release(slots[1])
    assert ledger.used == 0
    # Each entry holds its prompt and generated tokens but the last: 20 + 4 and 30 + 4.
    ledger.trim(100 - 24 - 34)
    a.appended, a.turn = 3, 1
    back = admitted(ledger, a, 2)
    assert (back.computed, back.prefill_left) == (24, 4)  # the turn's last token and the 3 tool tokens
    ledger.drop(back, a.context_tokens + 1)
    ledger.trim(100 - 34 + 1)  # room for one more token than b's entry leaves: b's entry goes
    b.appended, b.turn = 3, 1
    assert admitted(ledger, b, 3).computed == 0


# ---- decode batch ---------------------------------------------------------------------------------------------------

def test_the_batch_books_iterations_and_ends_turns_in_finish_then_admission_order():
    ended = []
    batch = DecodeBatch(FixedCosts(), lambda slot: ended.append((slot.rollout.seq_id, slot.rollout.generated)))
    slots = []
    for order, (prompt, target) in enumerate([(10, 4), (20, 2), (30, 2)]):
        r = rollout(order, prompt, target)
        r.generated = 1  # its first token came from its prefill
        slot = Slot(r, order)
        batch.join(slot)
        slots.append(slot)
    assert (batch.size, batch.context) == (3, 10 + 20 + 30)
    grown = batch.advance(1, decode=True)
    assert grown == 3 and batch.context == 63
    batch.finish_due()
    assert ended == [(1, 2), (2, 2)] and batch.size == 1
    batch.advance(2, decode=True)
    batch.finish_due()
    assert ended[-1] == (0, 4) and batch.size == 0


@given(st.lists(st.one_of(st.integers(0, 40), st.none()), max_size=120))
def test_the_finish_heap_pops_the_slots_heapq_pops_over_finish_and_order_pairs(operations):
    """A push (the slot's finish iteration, drawn; finishes repeat and tie-break by admission order) or a pop (None),
    in any mix: every pop takes the slot heapq would over (finish, order, slot) tuples."""
    heap: list[Slot] = []
    reference: list[tuple[int, int, Slot]] = []
    for order, finish in enumerate(operations):
        if finish is None:
            if reference:
                assert heap[0] is heapq.heappop(reference)[2]
                pop_finish(heap)
            continue
        slot = Slot(rollout(order, 10, 5), order)
        slot.finish = finish
        push_finish(heap, slot)
        heapq.heappush(reference, (finish, order, slot))
        assert heap[0] is reference[0][2]
    while reference:
        assert heap[0] is heapq.heappop(reference)[2]
        pop_finish(heap)
    assert not heap


def test_decode_read_sums_every_iterations_reads():
    batch, context, k = 7, 1000, 13
    assert decode_read(batch, context, k) == sum(context + i * batch + batch for i in range(k))


def test_a_left_sequence_is_skipped_and_brought_up_to_date():
    ended = []
    batch = DecodeBatch(FixedCosts(), lambda slot: ended.append(slot.rollout.seq_id))
    a, b = rollout(0, 10, 5), rollout(1, 10, 3)
    a.generated = b.generated = 1
    slot_a, slot_b = Slot(a, 0), Slot(b, 1)
    batch.join(slot_a)
    batch.join(slot_b)
    batch.advance(1, decode=True)
    batch.leave(slot_b)
    slot_b.live = False
    assert b.generated == 2 and batch.size == 1
    batch.advance(3, decode=True)
    batch.finish_due()
    assert ended == [0]


def test_a_stretch_runs_to_the_first_finish_or_the_kv_room_and_a_wake_up_waits_for_the_iteration_in_flight():
    batch = DecodeBatch(FixedCosts(), lambda slot: None)  # one second per decode iteration
    for order, target in enumerate([50, 80]):
        r = rollout(order, 10, target)
        r.generated = 1
        batch.join(Slot(r, order))
    assert batch.begin_stretch(0.0, room=1000).k == 49
    batch.end_stretch()
    stretch = batch.begin_stretch(0.0, room=21)  # 2 tokens per iteration
    assert (stretch.k, stretch.seconds) == (10, 10.0)
    assert batch.unbooked(3.5) == 3
    assert batch.cut_short(3.5) == pytest.approx(0.5)  # the 4th iteration completes
    assert batch.end_stretch() == 4 and batch.unbooked(3.5) == 0
    batch.begin_stretch(0.0, room=21)
    assert batch.cut_short(3.0) is None  # woken at a boundary: nothing in flight
    assert batch.end_stretch() == 3
    batch.begin_stretch(5.0, room=21)
    assert batch.cut_short(5.0) == pytest.approx(1.0)  # woken as it began: its first iteration is in flight
    assert batch.end_stretch() == 1


# ---- state and pauses -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("initial_time", [0, 2.5])
def test_the_engines_clock_is_simpys_at_every_event_of_a_run(initial_time):
    """`sim_now` reads the attribute SimPy keeps its clock in, past its `now` property: the two agree from the start,
    at every event of processes interrupting each other, and after the run (a SimPy that moved its clock elsewhere
    fails here, not in a run's results)."""
    env = simpy.Environment(initial_time)
    seen = [(sim_now(env), env.now)]

    def sleeper():
        for delay in (0.5, 0.0, 1.25):
            try:
                yield env.timeout(delay)
            except simpy.Interrupt:
                pass
            seen.append((sim_now(env), env.now))

    def waker(target):
        yield env.timeout(0.2)
        target.interrupt()
        seen.append((sim_now(env), env.now))

    env.process(waker(env.process(sleeper())))
    env.run()
    seen.append((sim_now(env), env.now))
    assert len(seen) == 6 and seen[-1][1] > initial_time
    assert all(ours == simpys for ours, simpys in seen)


def test_a_pause_that_stops_sooner_overrides_one_under_way_and_resume_wakes_the_process():
    env = simpy.Environment()
    trace = []

    def run():
        yield state.idle()
        trace.append(("woken", env.now, state.pause.mode))
        state.activity = BUSY
        yield state.take_pause()
        trace.append(("resumed", env.now))

    state = EngineState(env, run())
    env.run(until=1.0)
    assert state.activity is IDLE
    taken = state.ask_pause("drain")  # wakes an idle process
    state.ask_pause("interrupt")
    state.ask_pause("hold")

    def controller():
        yield taken
        trace.append(("paused", env.now))
        assert state.activity is PAUSED and state.ask_pause("drain").triggered
        yield env.timeout(2.0)
        state.resume()

    env.process(controller())
    env.run()
    assert trace == [("woken", 1.0, "interrupt"), ("paused", 1.0), ("resumed", 3.0)]


@pytest.mark.parametrize("kind", [Rollout, MultiTurnRollout, SegmentedRollout])
def test_a_rollouts_written_constructor_takes_its_fields_in_order_with_their_defaults(kind):
    """The rollouts' __init__ is written out (a dataclass's generated one is interpreted code when compiled): it must
    take every field by name and in the fields' order, and leave each field it is not given at the field's default.
    Checked by calling it (a compiled __init__ has no signature to inspect)."""
    fields = dataclasses.fields(kind)
    values: dict[str, object] = {}  # a distinct value a field, of its type (compiled, each parameter is checked)
    for index, f in enumerate(fields):
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")  # compiled: the class
        values[f.name] = {"int": index + 3, "float": index + 3.5, "bool": True}.get(type_name)
    values["shared_prompt"] = SharedPrompt(7, None)
    if kind is MultiTurnRollout:
        values["turns"] = (Turn(values["target_tokens"]),)
    assert None not in values.values(), "a field of a type this test does not fill"
    by_name = kind(**values)
    in_order = kind(*values.values())
    for made in (by_name, in_order):
        assert {f.name: getattr(made, f.name) for f in fields} == values
    required = {f.name: values[f.name] for f in fields if f.default is dataclasses.MISSING}
    if kind is MultiTurnRollout:  # a trajectory needs its turns, whose tokens make its target
        required["turns"] = values["turns"]
    defaulted = kind(**required)
    for f in fields:
        expected = required[f.name] if f.name in required else f.default
        assert getattr(defaulted, f.name) == expected, f.name
