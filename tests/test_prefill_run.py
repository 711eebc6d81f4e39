"""Prefill runs (rlsim.sim.engine.prefill_run): a long prefill's chunks booked in one event must leave every trace the
boundary-by-boundary path leaves, to the bit, and save an event per chunk. The random-scenario comparison with that
path (preemption chains and prefill runs together) is tests/test_preemption_chain.py's; these cases isolate runs."""
from __future__ import annotations

import pytest

from tests.test_preemption_chain import run
from tests.test_sim_rollout import Scenario


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
