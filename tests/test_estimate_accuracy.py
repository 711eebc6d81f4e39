"""`rlsim estimate` against the simulation in steady state (after the pipeline fill), on every shipped scenario: within
15 % for synchronous schedules and 25 % for off-policy ones (`rlsim.validation.estimate_accuracy.BOUNDS`). The table of
docs/estimate.md comes from the same function. Each scenario simulates its fill plus three measured steps, a few
seconds of CPU at most."""
from __future__ import annotations

import pytest

from rlsim.validation.estimate_accuracy import BOUNDS, SHIPPED, accuracy


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_estimate_agrees_with_the_steady_state_simulation(path):
    row = accuracy(path)
    assert row.within_bound, (f"{row.scenario} ({row.schedule}): estimate {row.estimate_s:.1f} s, simulated "
                              f"{row.simulated_s:.1f} s, {row.error:+.1%} (bound ±{BOUNDS[row.schedule]:.0%})")


def test_every_shipped_scenario_is_covered():
    assert len(SHIPPED) >= 8 and {"sync", "one_step_off", "async"} <= set(BOUNDS)
