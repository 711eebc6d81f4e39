"""The one registry (rlsim/registry.py): a policy registered from outside the package is accepted by the scenario's
schema, listed by `rlsim schema`, and run by the simulator; unregistering it leaves no trace. A schedule's registered
facts are all the loader's checks, the default warm-up and the estimate know of it; a length model's registered
parameter class is all the schema knows of it."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, get_args

import pytest
from pydantic import Field

from rlsim import registry
from rlsim.api import simulate
from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config import workload as config
from rlsim.config.bound import bind
from rlsim.config.schedule_kind import ScheduleKind
from rlsim.config.schema import scenario_json_schema
from rlsim.config.workload import LengthParams
from rlsim.errors import ScenarioError
from rlsim.estimate import estimate_step
from rlsim.fields import PositiveInt
from rlsim.sim.balance import register_balancer
from rlsim.sim.dp_balance import in_order, register_dp_balancer
from rlsim.sim.schedules import SCHEDULES, register_schedule
from rlsim.workload.lengths import FiniteLengths, LengthDistribution, register_length_model
from tests.sim_scenarios import scenario_yaml

TINY = dict(gpus=4, prompts=4, samples=2, steps=1, max_response=256)


def first_engine(unit, engines, dispatcher) -> int:
    """A toy load balancer: every rollout to engine 0."""
    return 0


def one_rank(lengths, ranks):
    """A toy DP balancer: every sequence on rank 0."""
    return [list(range(len(lengths)))] + [[] for _ in range(ranks - 1)]


built: list[str] = []


def recorded_sync(sim, reward, sampling):
    """A toy schedule's controller: the synchronous one, noting that it was chosen."""
    built.append(sim.bound.scenario.name)
    return SCHEDULES["sync"].controller(sim, reward, sampling)


def summed_by_the_toy(produce: float, train: float, sync: float) -> tuple[float, str]:
    return produce + train + sync, "the toy's own sum"


# Facts no shipped schedule has, so that every place that reads them shows the toy's: a staleness bound the scenario
# sets (default 3) and a pipeline that fills for two versions.
RECORDED_SYNC = ScheduleKind(recorded_sync, off_policy=False, staleness=3, takes_max_staleness=True,
                             versions_ahead=lambda schedule: 2, steady_step=summed_by_the_toy)


class EvenLength(LengthParams):
    """A toy length model: every length from `shortest` to `longest` tokens equally likely."""

    kind: Literal["even"] = Field(description="even: every length between two bounds equally likely")
    shortest: PositiveInt = Field(description="the shortest length, in tokens")
    longest: PositiveInt = Field(description="the longest length, in tokens")


def even(model: EvenLength, field: str) -> LengthDistribution:
    return FiniteLengths.of("even", range(model.shortest, model.longest + 1))


@pytest.fixture
def toys() -> Iterator[None]:
    register_balancer("first_engine")(first_engine)
    register_dp_balancer("one_rank")(one_rank)
    register_schedule("recorded_sync")(RECORDED_SYNC)
    register_length_model(EvenLength)(even)
    built.clear()
    yield
    registry.LOAD_BALANCERS.unregister("first_engine")
    registry.DP_BALANCERS.unregister("one_rank")
    registry.SCHEDULES.unregister("recorded_sync")
    registry.LENGTH_MODELS.unregister("even")


def test_a_balancer_registered_outside_the_package_routes_the_run(toys):
    result = simulate(parse_scenario(scenario_yaml(balancer="first_engine", **TINY)))
    assert {record.engine for record in result.log.sequences} == {0}
    decoding = {span.first_gpu for span in result.log.spans if span.label == "decode"}
    assert decoding == {0}
    spread = simulate(parse_scenario(scenario_yaml(**TINY)))
    assert {record.engine for record in spread.log.sequences} == {0, 1, 2, 3}


def test_a_dp_balancer_registered_outside_the_package_splits_the_batch(toys):
    def training_seconds(dp_balance: str) -> dict[str, float]:
        log = simulate(parse_scenario(scenario_yaml(dp_balance=dp_balance, **TINY))).log
        seconds: dict[str, float] = {}
        for span in log.spans:
            if span.label in ("train_forward", "train_backward"):
                seconds[span.unit] = seconds.get(span.unit, 0.0) + span.end - span.start
        return seconds

    # Rank 0 trains the whole batch while the others wait at the barrier; balanced, all four train.
    assert set(training_seconds("one_rank")) == {"dp0"}
    assert set(training_seconds("sorted_greedy")) == {"dp0", "dp1", "dp2", "dp3"}


def test_a_schedule_registered_outside_the_package_runs_the_steps(toys):
    # The toy is on-policy, so the loader's checks allow it on colocated GPUs (scenario_yaml's default); four steps
    # leave the three of its pipeline's fill out of the measured one.
    result = simulate(parse_scenario(scenario_yaml(schedule="recorded_sync", **{**TINY, "steps": 4})))
    assert built == ["test"]
    assert result.scenario.schedule.mode == "recorded_sync"
    assert len(result.log.steps) == 4
    assert len(result.log.sequences) == 4 * 4 * 2


def _with_default_run_length(text: str) -> str:
    return text.replace("run: {steps: 1}\n", "")


def test_a_registered_schedule_is_checked_warmed_up_and_estimated_by_its_facts(toys, tmp_path, capsys):
    scenario = parse_scenario(_with_default_run_length(scenario_yaml(schedule="recorded_sync", **TINY)))
    assert scenario.schedule.max_staleness == 3
    assert (scenario.run.warmup_steps, scenario.run.steps) == (3, 6)  # fills two versions, then the first step
    assert estimate_step(bind(scenario)).overlap == "recorded_sync: the toy's own sum"
    path = tmp_path / "toy.yaml"
    path.write_text(scenario_yaml(schedule="recorded_sync", staleness=5, **TINY))
    assert main(["check", str(path)]) == 0
    assert "schedule   recorded_sync (max staleness 5)" in capsys.readouterr().out
    # An off-policy schedule may not share GPUs between generation and training; the message lists the ones that may.
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(schedule="async", **TINY))
    [problem] = caught.value.problems
    assert problem.path == "schedule.mode" and problem.valid is not None and "recorded_sync" in problem.valid


def test_a_length_model_registered_outside_the_package_is_validated_drawn_and_estimated(toys):
    scenario = parse_scenario(scenario_yaml(response="{kind: even, shortest: 100, longest: 300}", **TINY))
    assert scenario.workload.response_tokens == EvenLength(kind="even", shortest=100, longest=300)
    lengths = {record.response_tokens for record in simulate(scenario).log.sequences}
    assert min(lengths) >= 100 and max(lengths) <= 300 and len(lengths) > 1
    # TINY's prompts are 64 tokens; the estimate trains prompt + the responses' mean, 200.
    estimate = estimate_step(bind(scenario))
    assert estimate.tokens_per_step / (4 * 2) == pytest.approx(64 + 200, rel=0.02)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(response="{kind: even, shortest: 100}", **TINY))
    [problem] = caught.value.problems
    assert problem.path == "workload.response_tokens.longest" and "missing" in problem.message


def test_the_schema_lists_a_registered_policy_and_forgets_it_when_unregistered(toys):
    schedule = scenario_json_schema()["$defs"]["Schedule"]["properties"]
    assert "first_engine" in schedule["load_balancer"]["enum"]
    assert "one_rank" in schedule["dp_balance"]["enum"]
    assert "recorded_sync" in schedule["mode"]["enum"]
    response = scenario_json_schema()["$defs"]["Workload"]["properties"]["response_tokens"]["anyOf"][0]
    assert response["discriminator"]["mapping"]["even"] == "#/$defs/EvenLength"
    registry.LENGTH_MODELS.unregister("even")
    try:
        assert "EvenLength" not in scenario_json_schema()["$defs"]
        with pytest.raises(ScenarioError) as unknown:
            parse_scenario(scenario_yaml(response="{kind: even, shortest: 100, longest: 300}", **TINY))
    finally:
        register_length_model(EvenLength)(even)
    [problem] = unknown.value.problems
    assert problem.path == "workload.response_tokens" and "'even' is not a known kind" in problem.message
    registry.LOAD_BALANCERS.unregister("first_engine")
    try:
        assert "first_engine" not in scenario_json_schema()["$defs"]["Schedule"]["properties"]["load_balancer"]["enum"]
        with pytest.raises(ScenarioError) as caught:
            parse_scenario(scenario_yaml(balancer="first_engine", **TINY))
    finally:
        register_balancer("first_engine")(first_engine)
    [problem] = caught.value.problems
    assert problem.path == "schedule.load_balancer" and problem.line is not None
    assert "not a known load balancer" in problem.message and "round_robin" in str(problem.valid)


def test_an_unknown_name_lists_the_registered_ones_with_a_did_you_mean(toys):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(balancer="first_engin", **TINY))
    [problem] = caught.value.problems
    assert problem.path == "schedule.load_balancer"
    assert problem.suggestion == "first_engine"
    assert problem.valid is not None and "first_engine" in problem.valid and "least_kv" in problem.valid


def test_a_name_registered_twice_is_an_error(toys):
    with pytest.raises(ValueError, match="registered twice"):
        register_dp_balancer("none")(in_order)


def _tags(union) -> list[str]:
    return sorted(get_args(member.model_fields["kind"].annotation)[0] for member in get_args(get_args(union)[0]))


@pytest.mark.parametrize(("union", "kind"), [
    (config.LatencyModel, registry.LATENCY_MODELS), (config.Budget, registry.BUDGETS),
    (config.Informative, registry.GROUP_FILTERS), (config.RewardConfig, registry.REWARDS)],
    ids=lambda v: getattr(v, "kind", ""))
def test_every_kind_the_schema_accepts_has_a_builder(union, kind):
    # These kinds are tagged unions of config classes; each tag needs its registered builder. (The length models'
    # union is the registry's own: each registers its parameter class with its builder.)
    assert _tags(union) == kind.names()
