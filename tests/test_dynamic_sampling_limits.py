"""Dynamic sampling with a filter that keeps almost no group (a success rate of 1e-9: every group all wrong) would
draw groups without end; the estimate and the simulation refuse it at workload.informative instead of dividing by
zero or filling memory."""
from __future__ import annotations

import pytest

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import ScenarioError
from rlsim.estimate import estimate_step
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import scenario_yaml


def _dapo(success_rate: float) -> str:
    return scenario_yaml(algorithm="dapo", dynamic_sampling=True, workload=(
        f"success_rate: {{mean: {success_rate}, concentration: 1.2}}\ninformative: {{kind: success_rate}}"))


@pytest.mark.parametrize("price", [estimate_step, simulate_log])
def test_a_filter_that_keeps_no_group_is_refused_at_its_field(price):
    with pytest.raises(ScenarioError, match="workload.informative") as err:
        price(bind(parse_scenario(_dapo(1e-9))))
    assert "dynamic sampling keeps" in str(err.value)


def test_a_filter_that_keeps_groups_is_priced():
    assert estimate_step(bind(parse_scenario(_dapo(0.45)))).step_s > 0
