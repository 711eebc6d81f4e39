"""Prefill runs (rlsim.sim.engine.prefill_run): long prefills' chunks booked in one event must leave every trace the
boundary-by-boundary path leaves, to the bit, and save an event per chunk — a single long prefill's, and several
readmitted ones' side by side, where one's last chunk shares an iteration with the next one's first and the completed
one joins the decode batch at a boundary inside the run. Random prefill-heavy scenarios compare runs on and off, and
the fast mode with stepping every iteration."""
from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np
import pytest
import simpy

from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.prefill_run import PrefillRun
from rlsim.sim.engine.scheduler import Scheduler
from rlsim.sim.engine.slot import Slot
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from tests.interpreted_engine import needs_interpreted_engine
from tests.test_preemption_chain import run
from tests.test_sim_rollout import PAUSE_MODES, Scenario, assert_fast_matches_exact


def long_prompts(scale: int, pauses: list[tuple[float, str, float]] | None = None) -> Scenario:
    """Eight groups of prompts 500·scale tokens long over a 64-token budget, their short answers decoding beside the
    later prompts' chunks; a cache large enough never to preempt."""
    rollouts = [(g, 500 * scale + 13 * g, 20 + 7 * g, g % 2, 0.0) for g in range(8)]
    return Scenario(2, rollouts, kv=100_000, seqs=4, batched=64, sharing=True, pauses=pauses or [])


@pytest.mark.parametrize("scale", [1, 4])
def test_a_run_books_what_boundary_by_boundary_booking_books(scale):
    booked, booked_events = run(long_prompts(scale), chains=True)
    stepped, stepped_events = run(long_prompts(scale), chains=False)
    assert booked == stepped
    # Each prompt takes ~8·scale chunks; all but the few that share an iteration with a finish are one event.
    assert stepped_events - booked_events >= 8 * 6 * scale


def test_events_do_not_grow_with_the_prompts_length():
    """Prompts ×4 longer take ×4 the chunks, not ×4 the events: what grows is the boundaries booked in one event."""
    _, events = run(long_prompts(1), chains=True)
    _, longer_events = run(long_prompts(4), chains=True)
    assert longer_events <= 1.2 * events


@pytest.mark.parametrize("how", ["drain", "interrupt", "hold"])
@pytest.mark.parametrize("at", [0.0005, 0.003, 0.011])
def test_a_pause_mid_run_cuts_it_where_the_step_by_step_path_stops(how, at):
    """A pause lands inside a run: an interrupting or holding pause cuts it after the iteration in flight, a drain lets
    it finish; either way every trace matches the boundary-by-boundary path, read mid-run by a balancer too."""
    scenario = long_prompts(4, pauses=[(at, how, 0.002)])
    booked, _ = run(scenario, chains=True, observe_every=0.00037)
    stepped, _ = run(scenario, chains=False, observe_every=0.00037)
    assert booked == stepped


def pure_boundaries(samples: dict) -> tuple[int, int]:
    """Boundaries of a step-by-step trace between two prefill iterations at which no sequence came or went (running
    and waiting as at the boundary before): what a run may book without an event of its own; and of those, the ones
    where a completed prefill joined the decode batch."""
    pure = joined = 0
    for series in samples.values():
        for before, at, after in zip(series, series[1:], series[2:], strict=False):
            prefill_in = at.iterations == before.iterations + 1 and at.decode_iterations == before.decode_iterations
            prefill_out = after.iterations == at.iterations + 1 and after.decode_iterations == at.decode_iterations
            if prefill_in and prefill_out and (at.running, at.waiting) == (before.running, before.waiting):
                pure += 1
                joined += at.decoding > before.decoding
    return pure, joined


def readmitted_contexts(scale: int) -> Scenario:
    """Answers ×`scale` long on a cache that holds about three of them at their end: the latest admitted are
    preempted, and readmitted with their contexts (×`scale` longer) over a 64-token budget, one's last chunk sharing
    an iteration with the next one's first."""
    rollouts = [(g, 40 + 3 * g, 300 * scale + 17 * g, 0, 0.0) for g in range(8)]
    return Scenario(1, rollouts, kv=1000 * scale, seqs=8, batched=64, sharing=True)


@pytest.mark.parametrize("scale", [1, 4])
def test_readmitted_contexts_prefilled_side_by_side_are_booked_as_the_step_by_step_path_books_them(scale):
    booked, booked_events = run(readmitted_contexts(scale), chains=True)
    stepped, stepped_events = run(readmitted_contexts(scale), chains=False)
    assert booked == stepped
    assert booked["preemptions"][0] >= 8
    # Every pure boundary is booked inside a run (the preemption chains save events besides).
    pure, joined = pure_boundaries(stepped["samples"])
    assert joined >= 4
    assert stepped_events - booked_events >= pure


def test_a_run_goes_on_through_a_boundary_where_a_prefill_completes_and_joins_the_batch():
    """Prompts of ~600 tokens over a 64-token budget, four at a time: each prompt's last chunk shares an iteration
    with the next one's first, and at the boundary after it the completed prompt joins the decode batch while the next
    one's chunk takes the whole budget — a boundary inside a run. Every pure boundary is booked inside a run but the
    last wave's final chunks': the queue is empty then, and a rollout submitted meanwhile could be admitted beside
    them."""
    rollouts = [(g, 600 + 11 * g, 400, 0, 0.0) for g in range(8)]
    scenario = Scenario(1, rollouts, kv=100_000, seqs=4, batched=64, sharing=True)
    booked, booked_events = run(scenario, chains=True)
    stepped, stepped_events = run(scenario, chains=False)
    assert booked == stepped
    pure, joined = pure_boundaries(stepped["samples"])
    assert pure >= 8 * 8 and joined >= 4  # ~9 chunks a prompt
    assert stepped_events - booked_events >= pure - 4


def random_groups(rng: np.random.Generator, groups: int, prompts: tuple[int, int], arrival_s: float,
                  answers: tuple[int, int], group_sizes: int, engine: Callable[[], int]) -> list:
    """Scenario rollouts of `groups` GRPO groups, each of fewer than `group_sizes` rollouts sharing a prompt of
    `prompts` tokens (range), submitted at once or after an exponential delay of mean `arrival_s`, their answers
    long-tailed around `answers[0]` tokens up to `answers[1]`, each rollout on the `engine()` drawn."""
    rollouts = []
    typical, longest = answers
    for g in range(groups):
        prompt = int(rng.integers(*prompts))
        at = float(rng.exponential(arrival_s)) if rng.random() < 0.5 else 0.0
        targets = np.clip(rng.lognormal(np.log(typical), 0.8, int(rng.integers(1, group_sizes))), 1,
                          longest).astype(int)
        for target in targets:
            rollouts.append((g, prompt, int(target), engine(), at))
    return rollouts


def random_prefill_heavy(seed: int) -> Scenario:
    """Prompts several budgets long, answers long-tailed, on caches from a little more than the longest sequence
    (heavy preemption: readmissions re-prefill long contexts, several at once) to one that never fills; pauses of
    every kind, arrivals over time."""
    rng = np.random.default_rng(seed)
    engines = int(rng.integers(1, 3))
    batched = int(rng.choice([32, 64, 128]))
    rollouts = random_groups(rng, int(rng.integers(3, 9)), (batched // 2, 8 * batched), 0.05, (200, 1500), 4,
                             lambda: int(rng.integers(engines)))
    largest = max(p + t for _, p, t, _, _ in rollouts)
    kv = int(largest * rng.choice([1.1, 1.5, 3.0, 100.0]))
    pauses = sorted((float(rng.uniform(0.01, 0.5)), str(rng.choice(PAUSE_MODES)), float(rng.uniform(0.0, 0.05)))
                    for _ in range(int(rng.integers(0, 3))))
    return Scenario(engines, rollouts, kv, int(rng.integers(2, 10)), batched, bool(rng.random() < 0.5), pauses,
                    admission=str(rng.choice(["current_kv", "past_future"])))


@pytest.mark.parametrize("seed", range(16))
def test_random_prefill_heavy_runs_book_what_the_step_by_step_path_books(seed):
    scenario = random_prefill_heavy(seed)
    booked, booked_events = run(scenario, chains=True, observe_every=0.0071)
    stepped, stepped_events = run(scenario, chains=False, observe_every=0.0071)
    assert booked == stepped
    assert booked_events <= stepped_events


@pytest.mark.parametrize("seed", range(16))
def test_random_prefill_heavy_fast_matches_exact(seed):
    assert_fast_matches_exact(random_prefill_heavy(seed))


def test_the_random_prefill_heavy_scenarios_exercise_readmissions_joins_and_pauses():
    outcomes = [run(random_prefill_heavy(seed), chains=False)[0] for seed in range(16)]
    assert sum(sum(outcome["preemptions"]) > 0 for outcome in outcomes) >= 4
    assert sum(pure_boundaries(outcome["samples"])[1] for outcome in outcomes) >= 32
    assert sum(len(random_prefill_heavy(seed).pauses) > 0 for seed in range(16)) >= 6


class AdmissionSpy:
    """Counts, over a run, the admissions booked after the fact (planned inside prefill runs), those planned with
    their group's prompt held by a rollout admitted earlier in the same run, the runs cut short with admissions
    still planned, and the rollouts submitted while admissions were planned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.booked = self.shared_in_run = self.cut_with_admissions = self.submitted_mid_run = 0
        book, plan_admission, cut = Scheduler.book_admission, KVLedger.admission_plan, PrefillRun.cut
        submit = RolloutEngine.submit

        def submit_mid_run(engine: RolloutEngine, rollout: Rollout, predicted: float | None = None) -> None:
            engine.settle()
            planned = engine._chain  # noqa: SLF001 - what the engine sleeps through, to tell a submit mid-run
            self.submitted_mid_run += isinstance(planned, PrefillRun) and planned.queue_read() > 0
            submit(engine, rollout, predicted)

        def book_admission(scheduler: Scheduler, slot: Slot, at: float) -> None:
            self.booked += 1
            book(scheduler, slot, at)

        def admission_plan(kv: KVLedger, rollout: Rollout, plan: int):
            reserved = plan_admission(kv, rollout, plan)
            entry = rollout.shared_prompt  # its group's, which the ledger found
            if kv.sharing and entry is not None and entry.planned_by == plan and not kv.holds_prompt(rollout.group):
                self.shared_in_run += 1
            return reserved

        def cut_short(run: PrefillRun) -> float:
            self.cut_with_admissions += run.queue_read() > 0
            return cut(run)

        monkeypatch.setattr(Scheduler, "book_admission", book_admission)
        monkeypatch.setattr(KVLedger, "admission_plan", admission_plan)
        monkeypatch.setattr(PrefillRun, "cut", cut_short)
        monkeypatch.setattr(RolloutEngine, "submit", submit_mid_run)


def queued_groups(submitted_late: int = 0) -> Scenario:
    """Pairs of a GRPO group, prompts ~300 tokens over a 64-token budget, four sequences at a time: a prompt's last
    chunk leaves budget for the queue's heads, the pair's second shares the prompt of the first admitted just before
    (a 1-token prefill) and the next group's first prompt starts beside them, so the run goes on through admissions.
    The last `submitted_late` groups are submitted while the first prompts prefill."""
    rollouts = [(g, 300 + 7 * g, 30 + g, 0, 0.0 if g < 6 - submitted_late else 0.0013 * g)
                for g in range(6) for _ in range(2)]
    return Scenario(2, rollouts, kv=100_000, seqs=4, batched=64, sharing=True)


@needs_interpreted_engine
@pytest.mark.parametrize("submitted_late", [0, 3])
def test_a_run_admits_the_queues_heads_where_the_step_by_step_path_does(submitted_late, monkeypatch):
    """Admissions planned inside runs leave the engine as the scheduler would have at their boundary: the same
    slots in the same order, admission times, cached prompts, KV tokens, samples and queue; rollouts submitted
    mid-run queue behind the admissions planned."""
    spy = AdmissionSpy(monkeypatch)
    booked, booked_events = run(queued_groups(submitted_late), chains=True)
    counted = spy.booked, spy.shared_in_run, spy.submitted_mid_run
    stepped, stepped_events = run(queued_groups(submitted_late), chains=False)
    assert booked == stepped
    assert counted[:2] >= (6, 1) and counted[2] >= submitted_late
    assert spy.booked == counted[0]  # the step-by-step path (a probe observes) plans no run
    # Every admission inside a run is a boundary booked without an event of its own.
    assert stepped_events - booked_events >= counted[0]


def stealing(steals: list[tuple[float, int]]) -> Callable[[simpy.Environment, list[RolloutEngine]], Generator]:
    """Work stealing from engine 0: at each (time, n) of `steals`, engine 1 takes up to n of its waiting rollouts."""
    def thief(env: simpy.Environment, engines: list[RolloutEngine]) -> Generator:
        for at, n in steals:
            yield env.timeout(max(0.0, at - env.now))
            for rollout, predicted in engines[0].steal(n):
                engines[1].submit(rollout, predicted)
    return thief


@needs_interpreted_engine
@pytest.mark.parametrize("start", [0.0021, 0.0034, 0.0052, 0.0077])
def test_a_steal_of_a_rollout_a_run_planned_to_admit_cuts_the_run(start, monkeypatch):
    """Engine 1 steals from engine 0's queue one rollout at a time while engine 0 prefills through admissions: a
    steal that leaves the queue shorter than the admissions planned (and the head after them) cuts the run after
    the iteration in flight, and the engine admits afresh what is left."""
    spy = AdmissionSpy(monkeypatch)
    thief = stealing([(start + 0.0004 * i, 1) for i in range(12)])
    booked, _ = run(queued_groups(), chains=True, meddler=thief)
    cuts = spy.cut_with_admissions
    stepped, _ = run(queued_groups(), chains=False, meddler=thief)
    assert booked == stepped
    assert sum(engine for *_, engine in booked["rollouts"]) >= 1  # something was stolen
    assert cuts >= 1


@needs_interpreted_engine
@pytest.mark.parametrize("at", [0.0029, 0.0047, 0.0061])
def test_a_withdrawal_mid_run_cuts_the_admissions_planned(at, monkeypatch):
    """Engine 0's waiting rollouts are withdrawn mid-run and resubmitted to engine 1: the run is cut after the
    iteration in flight, and what it planned to admit runs on engine 1."""
    def withdrawal(env: simpy.Environment, engines: list[RolloutEngine]) -> Generator:
        yield env.timeout(at)
        for rollout in engines[0].withdraw():
            engines[1].submit(rollout)

    spy = AdmissionSpy(monkeypatch)
    booked, _ = run(queued_groups(), chains=True, meddler=withdrawal)
    cuts = spy.cut_with_admissions
    stepped, _ = run(queued_groups(), chains=False, meddler=withdrawal)
    assert booked == stepped
    assert cuts >= 1 and sum(engine for *_, engine in booked["rollouts"]) >= 1


@needs_interpreted_engine
def test_a_drain_cuts_a_run_that_planned_admissions(monkeypatch):
    """A drain stops admissions from the next boundary on: a run that planned some is cut after the iteration in
    flight, and the engine drains what runs."""
    spy = AdmissionSpy(monkeypatch)
    scenario = queued_groups()
    scenario.pauses = [(0.0045, "drain", 0.001)]
    booked, _ = run(scenario, chains=True)
    cuts = spy.cut_with_admissions
    stepped, _ = run(scenario, chains=False)
    assert booked == stepped
    assert cuts >= 1


def random_admitting(seed: int) -> tuple[Scenario, list[tuple[float, int]]]:
    """Prefill-heavy scenarios with long queues: groups of one to six rollouts sharing prompts one to eight budgets
    long, arrivals over time, a cache from tight (preemption, readmissions) to ample, pauses of every kind; and
    steals from engine 0's queue by engine 1."""
    rng = np.random.default_rng(seed)
    batched = int(rng.choice([32, 64, 128]))
    rollouts = random_groups(rng, int(rng.integers(4, 12)), (batched // 4, 8 * batched), 0.01, (80, 600), 7,
                             lambda: int(rng.random() < 0.2))
    largest = max(p + t for _, p, t, _, _ in rollouts)
    kv = int(largest * rng.choice([1.5, 3.0, 100.0]))
    pauses = sorted((float(rng.uniform(0.005, 0.1)), str(rng.choice(PAUSE_MODES)), float(rng.uniform(0.0, 0.01)))
                    for _ in range(int(rng.integers(0, 3))))
    steals = sorted((float(rng.uniform(0.0, 0.05)), int(rng.integers(1, 4))) for _ in range(int(rng.integers(0, 6))))
    return Scenario(2, rollouts, kv, int(rng.integers(2, 12)), batched, bool(rng.random() < 0.7), pauses), steals


@pytest.mark.parametrize("seed", range(24))
def test_random_runs_through_admissions_book_what_the_step_by_step_path_books(seed, monkeypatch):
    scenario, steals = random_admitting(seed)
    booked, booked_events = run(scenario, chains=True, observe_every=0.0013, meddler=stealing(steals))
    stepped, stepped_events = run(scenario, chains=False, observe_every=0.0013, meddler=stealing(steals))
    assert booked == stepped
    assert booked_events <= stepped_events


@pytest.mark.parametrize("seed", range(12))
def test_random_runs_through_admissions_fast_matches_exact(seed):
    assert_fast_matches_exact(random_admitting(seed)[0])


@needs_interpreted_engine
def test_the_random_admitting_scenarios_plan_admissions_in_runs_and_cut_some(monkeypatch):
    spy = AdmissionSpy(monkeypatch)
    for seed in range(24):
        scenario, steals = random_admitting(seed)
        run(scenario, chains=True, observe_every=0.0013, meddler=stealing(steals))
    assert spy.booked >= 100 and spy.shared_in_run >= 10 and spy.cut_with_admissions >= 3
