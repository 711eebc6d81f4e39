"""Prefill runs (rlsim.sim.engine.prefill_run): long prefills' chunks booked in one event must leave every trace the
boundary-by-boundary path leaves, to the bit, and save an event per chunk — a single long prefill's, and several
readmitted ones' side by side, where one's last chunk shares an iteration with the next one's first and the completed
one joins the decode batch at a boundary inside the run. Random prefill-heavy scenarios compare runs on and off, and
the fast mode with stepping every iteration."""
from __future__ import annotations

import numpy as np
import pytest

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


def random_prefill_heavy(seed: int) -> Scenario:
    """Prompts several budgets long, answers long-tailed, on caches from a little more than the longest sequence
    (heavy preemption: readmissions re-prefill long contexts, several at once) to one that never fills; pauses of
    every kind, arrivals over time."""
    rng = np.random.default_rng(seed)
    engines = int(rng.integers(1, 3))
    batched = int(rng.choice([32, 64, 128]))
    rollouts = []
    for g in range(int(rng.integers(3, 9))):
        prompt = int(rng.integers(batched // 2, 8 * batched))
        at = float(rng.exponential(0.05)) if rng.random() < 0.5 else 0.0
        targets = np.clip(rng.lognormal(np.log(200), 0.8, int(rng.integers(1, 4))), 1, 1500).astype(int)
        for target in targets:
            rollouts.append((g, prompt, int(target), int(rng.integers(engines)), at))
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
