"""The environment pool (workload.environments): its ledger against exact traces and queueing theory, its figures in
a run, turn-count drift, and the engines' `env_wait`."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from scipy.special import ndtri

from rlsim.config import parse_scenario
from rlsim.config.environments import EnvironmentPool
from rlsim.config.workload import MultiTurn
from rlsim.errors import ScenarioError
from rlsim.metrics import gpu_label_seconds
from rlsim.metrics.environments import environment_summary, peak_sandboxes
from rlsim.sim.environments import SandboxPool
from rlsim.workload.multiturn import TrajectorySampler
from tests.sim_scenarios import scenario_yaml
from tests.test_sim_loop import run

ENGINE = object()  # the pool keys its `env_wait` books by engine; without a recorder it books none


def pool_of(env: simpy.Environment, **fields) -> SandboxPool:
    return SandboxPool(env, None, EnvironmentPool(**fields), np.random.default_rng(0))


def call_at(env: simpy.Environment, pool: SandboxPool, at: float, seconds: float | tuple[float, ...],
            rollout: object | None = None,
            log: list | None = None, name: str = ""):
    def process():
        yield env.timeout(at)
        calls = seconds if isinstance(seconds, tuple) else (seconds,)
        yield from pool.calls(ENGINE, rollout if rollout is not None else object(), calls)
        if log is not None:
            log.append((name, env.now))
    return env.process(process())


# ------------------------------------------------------------------------------------------------ exact traces


def test_calls_queue_first_come_first_served_for_a_fixed_pool():
    env = simpy.Environment()
    pool = pool_of(env, sandboxes=1)
    log: list = []
    for name in "abc":
        call_at(env, pool, 0.0, 2.0, log=log, name=name)
    env.run()
    assert log == [("a", 2.0), ("b", 4.0), ("c", 6.0)]
    record = pool.record(env.now)
    assert record.call_acquired.tolist() == [0.0, 2.0, 4.0]
    assert not record.on_demand.any() and peak_sandboxes(record) == 1


def test_autoscaling_starts_sandboxes_on_demand_paying_the_delay_and_cold_start_then_stops_idle_ones():
    env = simpy.Environment()
    pool = pool_of(env, autoscaling={"min_sandboxes": 0, "max_sandboxes": 2, "scale_up_delay_s": 0.5,
                                     "keep_alive_s": 10.0}, cold_start={"kind": "fixed", "seconds": 1.0})
    log: list = []
    for name in "abc":
        call_at(env, pool, 0.0, 2.0, log=log, name=name)
    env.run()
    # Two start (ready at 1.5); the third waits for the first freed, at 3.5.
    assert log == [("a", 3.5), ("b", 3.5), ("c", 5.5)]
    record = pool.record(100.0)
    assert record.on_demand.sum() == 2 and peak_sandboxes(record) == 2
    assert record.sandbox_ready.tolist() == [1.5, 1.5]
    # Idle from 3.5 and 5.5, each stops keep_alive_s later (which one served c is the most recently freed).
    assert sorted(record.sandbox_stopped.tolist()) == [13.5, 15.5]


def test_autoscaling_never_exceeds_its_ceiling_nor_drops_below_its_floor():
    env = simpy.Environment()
    pool = pool_of(env, autoscaling={"min_sandboxes": 3, "max_sandboxes": 7, "keep_alive_s": 0.0},
                   cold_start={"kind": "lognormal", "median_s": 0.5, "sigma": 0.5})
    rng = np.random.default_rng(1)
    for at in np.cumsum(rng.exponential(0.2, 400)):
        call_at(env, pool, float(at), float(rng.exponential(2.0)))
    env.run()
    record = pool.record(env.now)
    assert peak_sandboxes(record) == 7
    assert pool.running >= 3 and record.on_demand.sum() > 0
    # However many stop, never fewer than the floor run (those starting not counted).
    moments = np.unique(np.concatenate([record.sandbox_ready, record.sandbox_stopped]))
    running = [((record.sandbox_ready <= t) & (record.sandbox_stopped > t)).sum() for t in moments[moments < env.now]]
    assert min(running) == 3


def test_a_trajectory_holds_its_sandbox_to_its_end_and_a_fresh_one_starts_cold_behind_it():
    env = simpy.Environment()
    pool = pool_of(env, sandboxes=1, scope="trajectory", cold_start={"kind": "fixed", "seconds": 3.0})
    first, second = object(), object()
    log: list = []

    def trajectory(rollout, at, name):
        yield env.timeout(at)
        yield from pool.calls(ENGINE, rollout, (1.0,))
        log.append((name + " call 1", env.now))
        yield env.timeout(1.0)  # generating its next turn, the sandbox still held
        yield from pool.calls(ENGINE, rollout, (1.0,))
        log.append((name + " call 2", env.now))
        pool.finished(rollout)

    env.process(trajectory(first, 0.0, "first"))
    env.process(trajectory(second, 0.5, "second"))
    env.run()
    # The second waits for the first to end (t = 3) and for the fresh sandbox's cold start (t = 6).
    assert log == [("first call 1", 1.0), ("first call 2", 3.0), ("second call 1", 7.0), ("second call 2", 9.0)]
    record = pool.record(env.now)
    assert record.on_demand.sum() == 2  # one behind each trajectory
    assert sorted(zip(record.hold_start.tolist(), record.hold_end.tolist(), strict=True)) == [(0.0, 3.0), (6.0, 9.0)]


def test_calls_wait_for_a_cpu_core_when_cores_are_the_limit():
    env = simpy.Environment()
    pool = pool_of(env, sandboxes=4, cpu_seconds_per_call=1.0, cpu_cores=1)
    log: list = []
    for name in "ab":
        call_at(env, pool, 0.0, 0.5, log=log, name=name)
    env.run()
    assert log == [("a", 1.5), ("b", 2.5)]


def test_a_turns_concurrent_calls_each_take_a_sandbox_and_the_turn_waits_for_the_slowest():
    env = simpy.Environment()
    pool = pool_of(env, sandboxes=2)
    log: list = []
    call_at(env, pool, 0.0, (1.0, 3.0, 2.0), log=log, name="three calls")
    call_at(env, pool, 0.5, 1.0, log=log, name="one call")
    env.run()
    # Two sandboxes: calls of 1 and 3 s start at 0; the 2 s call takes the first freed (t = 1) and ends at 3; the
    # other turn's call, arrived at 0.5, waits behind it for the next freed (t = 3).
    assert log == [("three calls", 3.0), ("one call", 4.0)]
    record = pool.record(env.now)
    assert sorted(record.call_acquired.tolist()) == [0.0, 0.0, 1.0, 3.0] and peak_sandboxes(record) == 2


def test_a_trajectory_runs_a_turns_concurrent_calls_side_by_side_in_its_one_sandbox():
    env = simpy.Environment()
    pool = pool_of(env, sandboxes=2, scope="trajectory", cold_start={"kind": "fixed", "seconds": 3.0})
    log: list = []
    rollout = object()
    call_at(env, pool, 0.0, (1.0, 2.0, 2.5), rollout=rollout, log=log, name="turn")
    env.run()
    assert log == [("turn", 2.5)]
    record = pool.record(env.now)
    # One use of one sandbox, held from the start: busy 2.5 s, however many calls ran side by side in it.
    assert record.call_done.tolist() == [2.5] and record.hold_start.tolist() == [0.0]
    assert pool.held[rollout][0] == 1  # the most recently freed warm sandbox, held to the trajectory's end


def test_calls_per_turn_draws_concurrent_calls_whose_slowest_sets_the_turn_and_whose_responses_add_up():
    def sampled(calls_per_turn: list[int]):
        config = MultiTurn.model_validate({
            "turns": {"values": [4]}, "calls_per_turn": {"values": calls_per_turn},
            "tool_turn_tokens": {"kind": "fixed", "tokens": 10}, "answer_turn_tokens": {"kind": "fixed", "tokens": 10},
            "tool_latency": {"kind": "lognormal", "median_s": 1.0, "sigma": 0.5},
            "tool_response_tokens": {"kind": "fixed", "tokens": 100}})
        drawn = TrajectorySampler(config).draw(np.random.default_rng(1), np.full(2000, 10),
                                               np.random.default_rng(0).standard_normal(2000), 0, 100, 100_000)
        return [turn for trajectory in drawn for turn in trajectory.turns[:-1]]

    one, three = sampled([1]), sampled([3])
    assert {len(turn.call_s) for turn in one} == {1} and {len(turn.call_s) for turn in three} == {3}
    assert {turn.tool_tokens for turn in one} == {100} and {turn.tool_tokens for turn in three} == {300}
    # The slowest of three lognormal(σ = 0.5) calls: its median is the 0.5^(1/3) = 79th percentile of one call.
    assert np.median([turn.tool_s for turn in three]) == pytest.approx(math.exp(0.5 * ndtri(0.5 ** (1 / 3))), rel=0.05)
    assert np.median([turn.tool_s for turn in one]) == pytest.approx(1.0, rel=0.05)
    mixed = sampled([1, 2])
    assert {len(turn.call_s) for turn in mixed} == {1, 2}


# ------------------------------------------------------------------------------------------------ queueing theory


def erlang_c_wait(servers: int, arrival_rate: float, service_rate: float) -> float:
    """Mean wait in queue of an M/M/c queue (Erlang C)."""
    load = arrival_rate / service_rate
    rho = load / servers
    tail = load ** servers / math.factorial(servers) / (1 - rho)
    p_wait = tail / (sum(load ** k / math.factorial(k) for k in range(servers)) + tail)
    return p_wait / (servers * service_rate - arrival_rate)


@pytest.mark.parametrize("servers,arrival_rate", [(1, 0.7), (4, 3.0), (16, 14.0)])
def test_a_fixed_pool_under_poisson_calls_waits_as_erlang_c_says(servers, arrival_rate):
    env = simpy.Environment()
    pool = pool_of(env, sandboxes=servers)
    rng = np.random.default_rng(servers)
    calls = 60_000
    for at, seconds in zip(np.cumsum(rng.exponential(1 / arrival_rate, calls)), rng.exponential(1.0, calls),
                           strict=True):
        call_at(env, pool, float(at), float(seconds))
    env.run()
    record = pool.record(env.now)
    waits = (record.call_acquired - record.call_arrived)[calls // 10:]  # past the empty start
    assert waits.mean() == pytest.approx(erlang_c_wait(servers, arrival_rate, 1.0), rel=0.08)


# ------------------------------------------------------------------------------------------------ in a run


MULTITURN = ("multiturn: {turns: {values: [2, 4]}, tool_turn_tokens: {kind: lognormal, median_tokens: 60, sigma: 0.5}, "
             "answer_turn_tokens: {kind: lognormal, median_tokens: 120, sigma: 0.5}, tool_latency: {kind: lognormal, "
             "median_s: 3.0, sigma: 0.5}, tool_response_tokens: {kind: fixed, tokens: 100}}")


def test_a_pool_that_is_never_the_limit_changes_no_time():
    """An always-warm pool with room for every call is today's tool latency: the same step times, to the bit."""
    plain, _ = run(warmup=0, response=None, workload=MULTITURN, steps=2)
    pooled, _ = run(warmup=0, response=None, workload=MULTITURN + "\nenvironments: {sandboxes: 1000}", steps=2)
    assert [s.seconds for s in pooled.steps] == [s.seconds for s in plain.steps]
    assert pooled.environments is not None and plain.environments is None


def test_a_small_pool_makes_calls_wait_and_steps_longer_and_is_deterministic():
    small = MULTITURN + ("\nenvironments: {sandboxes: 4, scope: trajectory, cold_start: {kind: lognormal, median_s: 1.0, "
                         "sigma: 0.5}, usd_per_sandbox_hour: 0.5}")
    plain, _ = run(warmup=0, response=None, workload=MULTITURN, steps=2)
    log, metrics = run(warmup=0, response=None, workload=small, steps=2)
    again, metrics_again = run(warmup=0, response=None, workload=small, steps=2)
    assert [s.seconds for s in log.steps] == [s.seconds for s in again.steps]
    assert log.steps[-1].end > plain.steps[-1].end
    pool = environment_summary(log, 0, metrics["step_time_s"]["mean"])
    assert pool == environment_summary(again, 0, metrics_again["step_time_s"]["mean"])
    assert pool["queue_wait_s"]["mean"] > 0 and pool["cold_starts"] > 0 and pool["peak_sandboxes"] == 4
    assert 0 < pool["utilisation"] < pool["held_fraction"] <= 1
    assert pool["usd_per_step"] == pytest.approx(pool["sandbox_hours_per_step"] * 0.5)


def test_engines_idle_while_their_trajectories_are_on_tool_calls_wait_on_the_environment():
    """One trajectory, one engine: the gaps while its tools run are env_wait, not the generation tail."""
    slow = MULTITURN.replace("median_s: 3.0, sigma: 0.5", "median_s: 20.0, sigma: 0.1")
    log, _ = run(warmup=0, response=None, workload=slow, steps=1, prompts=1, samples=2, gpus=1)
    seconds = gpu_label_seconds(log)[0]
    assert seconds.get("env_wait", 0.0) > 19.0  # at least one call of ~20 s with nothing else to run
    assert seconds.get("env_wait", 0.0) > seconds.get("tail", 0.0)


# ------------------------------------------------------------------------------------------------ turn-count drift


def test_the_turn_limit_grows_the_interaction_horizon_over_training():
    config = MultiTurn.model_validate({
        "turns": {"values": [2, 5, 10]}, "max_turns": [{"step": 0, "turns": 3}, {"step": 10, "turns": 6}],
        "tool_turn_tokens": {"kind": "fixed", "tokens": 10}, "answer_turn_tokens": {"kind": "fixed", "tokens": 10},
        "tool_latency": {"kind": "fixed", "seconds": 1.0}, "tool_response_tokens": {"kind": "fixed", "tokens": 10}})
    sampler = TrajectorySampler(config)
    scores = np.random.default_rng(0).standard_normal(3000)
    prompts = np.full(3000, 10)

    def turns(version: int) -> tuple[np.ndarray, np.ndarray]:
        drawn = sampler.draw(np.random.default_rng(1), prompts, scores, version, 100, 100_000)
        return np.array([len(t.turns) for t in drawn]), np.array([t.truncated for t in drawn])

    early, early_cut = turns(0)
    late, late_cut = turns(12)
    assert early.max() == 3 and late.max() == 6
    assert early.mean() < late.mean()
    assert early_cut.mean() == pytest.approx(2 / 3, abs=0.05)  # those that wanted 5 or 10 turns
    assert late_cut.mean() == pytest.approx(1 / 3, abs=0.05)  # those that wanted 10
    assert (turns(0)[0] == early).all()  # the same draws at the same version and seed


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("pool,field,words", [
    ("{sandboxes: 4, autoscaling: {max_sandboxes: 8}}", "workload.environments", "one of them"),
    ("{sandboxes: 4, scope: trajectory}", "workload.environments", "cold_start required"),
    ("{autoscaling: {min_sandboxes: 9, max_sandboxes: 8}, cold_start: {kind: fixed, seconds: 1}}",
     "workload.environments.autoscaling", "exceeds max_sandboxes"),
])
def test_a_bad_pool_is_refused_at_its_field(pool, field, words):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(scenario_yaml(response=None, workload=MULTITURN + f"\nenvironments: {pool}"))
    assert field in str(err.value) and words in str(err.value)


def test_a_pool_without_tool_calls_is_refused():
    with pytest.raises(ScenarioError) as err:
        parse_scenario(scenario_yaml(workload="environments: {sandboxes: 4}"))
    assert "environments run tool calls" in str(err.value)


def test_trajectories_holding_every_sandbox_while_waiting_for_engines_are_a_deadlock_the_run_reports():
    """Hybrid async: the engines sharing GPUs with training pause until a batch trains, with queued trajectories that
    hold both sandboxes; the batch's other trajectories wait for those sandboxes. A real cluster would hang; rlsim
    names the cause and what would run."""
    pool = ("environments: {autoscaling: {min_sandboxes: 0, max_sandboxes: 2, keep_alive_s: 0.0}, scope: trajectory, "
            "cold_start: {kind: lognormal, median_s: 0.3, sigma: 0.5}}")
    workload = ("multiturn: {turns: {values: [1, 3, 6]}, max_turns: [{step: 0, turns: 2}], tool_turn_tokens: {kind: "
                "lognormal, median_tokens: 40, sigma: 0.8}, answer_turn_tokens: {kind: lognormal, median_tokens: 100, "
                "sigma: 1.0}, tool_latency: {kind: lognormal, median_s: 0.4, sigma: 1.0}, tool_response_tokens: "
                "{kind: fixed, tokens: 60}}\n")
    kwargs = dict(prompts=8, samples=2, steps=1, response=None, max_response=256, max_num_seqs=2,
                  group_placement="together", dp_balance="none", informative=0.5, schedule="async", group_cap=1,
                  mode="hybrid", staleness=1, rollout_gpus=8, training_gpus=4)
    with pytest.raises(ScenarioError) as err:
        run(warmup=0, workload=workload + pool, **kwargs)
    assert "workload.environments" in str(err.value) and "deadlocked" in str(err.value)
    log, _ = run(warmup=0, workload=workload + pool.replace("scope: trajectory", "scope: call"), **kwargs)
    assert len(log.steps) == 1


# ------------------------------------------------------------------------------------------------ outputs


def test_a_pooled_run_reports_its_pool_in_the_summary_the_cost_check_and_compare(tmp_path, capsys):
    from rlsim.cli import main
    from rlsim.report.compare import NamedMetrics, compare_text, read_run_metrics

    pooled = MULTITURN + ("\nenvironments: {autoscaling: {max_sandboxes: 6, scale_up_delay_s: 1.0}, scope: trajectory, "
                          "cold_start: {kind: fixed, seconds: 2.0}, usd_per_sandbox_hour: 3.6}")
    for name, workload in (("plain", MULTITURN), ("pooled", pooled)):
        (tmp_path / f"{name}.yaml").write_text(scenario_yaml(response=None, workload=workload, steps=2))
        assert main(["run", str(tmp_path / f"{name}.yaml"), "--out", str(tmp_path / name), "--events", "none"]) == 0
    out = capsys.readouterr().out
    assert "tool-call wait for a sandbox, p99" in out and "sandbox cold starts" in out
    metrics = read_run_metrics(tmp_path / "pooled")
    pool, cost = metrics["environments"], metrics["cost"]
    assert pool["cold_starts"] > 0 and pool["peak_sandboxes"] <= 6
    assert cost["environment_usd_per_step"] == pool["usd_per_step"] > 0
    gpus_only = read_run_metrics(tmp_path / "plain")["cost"]
    assert "environment_usd_per_step" not in gpus_only and "environments" not in read_run_metrics(tmp_path / "plain")
    text = compare_text([NamedMetrics("plain", read_run_metrics(tmp_path / "plain")), NamedMetrics("pooled", metrics)])
    assert "environment utilisation" in text and "env_wait" in text
    assert main(["check", str(tmp_path / "pooled.yaml")]) == 0
    assert "autoscaled 0–6 sandboxes" in capsys.readouterr().out
