"""Load balancing policies: where each rollout goes, and what it does to the step's makespan."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from rlsim.config.schema import Schedule, scenario_json_schema
from rlsim.sim.balance import BALANCERS, Dispatcher
from rlsim.sim.recorder import Recorder
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from tests.test_sim_rollout import FixedCosts, real_costs


def make_engines(env, count, seqs=4, kv=1_000_000):
    recorder = Recorder(count)
    return [RolloutEngine(env, i, FixedCosts(), kv, seqs, 512, i, 1, recorder, lambda r: None) for i in range(count)]


def dispatcher(engines, balancer="round_robin", seed=0, **schedule):
    return Dispatcher(Schedule(load_balancer=balancer, **schedule), engines, np.random.default_rng(seed))


def rollouts(targets, prompt=10, per_group=1):
    return [Rollout(i, i // per_group, prompt, int(t), False, 0.0) for i, t in enumerate(targets)]


def test_the_schema_lists_every_registered_balancer():
    assert scenario_json_schema()["$defs"]["Schedule"]["properties"]["load_balancer"]["enum"] == sorted(BALANCERS)


def test_round_robin_deals_rollouts_in_turn():
    env = simpy.Environment()
    engines = make_engines(env, 3)
    batch = rollouts([5] * 7)
    dispatcher(engines).dispatch(batch)
    assert [r.engine for r in batch] == [0, 1, 2, 0, 1, 2, 0]


def test_least_requests_fills_the_emptiest_engines_first():
    env = simpy.Environment()
    engines = make_engines(env, 3)
    for r in rollouts([5] * 4):
        engines[0].submit(r)
    batch = rollouts([5] * 6)
    dispatcher(engines, "least_requests").dispatch(batch)
    assert [e.outstanding for e in engines] == [4, 3, 3]
    assert all(r.engine != 0 for r in batch)


def test_least_kv_balances_the_context_engines_will_cache():
    env = simpy.Environment()
    engines = make_engines(env, 2)
    batch = [Rollout(i, i, prompt, 5, False, 0.0) for i, prompt in enumerate([900, 100, 100, 100, 100, 500, 100])]
    dispatcher(engines, "least_kv").dispatch(batch)
    assert [r.engine for r in batch] == [0, 1, 1, 1, 1, 1, 0]
    assert [e.queued_tokens for e in engines] == [1000, 900]


def test_together_keeps_a_group_on_one_engine_and_spread_does_not():
    env = simpy.Environment()
    engines = make_engines(env, 4)
    together = rollouts([5] * 16, per_group=4)
    dispatcher(engines, "least_requests", group_placement="together").dispatch(together)
    assert [{r.engine for r in together if r.group == g} for g in range(4)] == [{0}, {1}, {2}, {3}]
    spread = rollouts([5] * 16, per_group=4)
    dispatcher(engines, "round_robin", group_placement="spread").dispatch(spread)
    assert all(len({r.engine for r in spread if r.group == g}) == 4 for g in range(4))


def makespan(balancer: str, targets, noise: float = 0.0, seed: int = 0) -> float:
    env = simpy.Environment()
    engines = make_engines(env, 4, seqs=2)
    batch = rollouts(targets)
    dispatcher(engines, balancer, seed, length_predictor_noise=noise).dispatch(batch)
    env.run()
    return max(r.finished for r in batch)


SKEWED = [2000 if i % 4 == 0 else 50 for i in range(32)]  # round-robin deals every long rollout to engine 0


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_length_aware_beats_round_robin_on_skewed_lengths(noise):
    assert makespan("length_aware", SKEWED, noise) < 0.6 * makespan("round_robin", SKEWED)


def test_length_aware_predictions_carry_the_configured_noise():
    env = simpy.Environment()
    engines = make_engines(env, 1)
    batch = rollouts([1000] * 2000)
    dispatcher(engines, "length_aware", seed=3, length_predictor_noise=0.5).dispatch(batch)
    errors = np.exp(0.5 * np.random.default_rng(3).standard_normal(2000))
    assert engines[0].predicted_work == pytest.approx(1000 * errors.sum())
    assert engines[0].predicted_work / 2_000_000 == pytest.approx(np.exp(0.5**2 / 2), rel=0.05)  # lognormal mean


def test_the_same_seed_gives_the_same_assignment():
    def assignment(seed):
        env = simpy.Environment()
        engines = make_engines(env, 8)
        batch = rollouts(np.random.default_rng(0).lognormal(6, 1, 200).astype(int) + 1)
        dispatcher(engines, "length_aware", seed, length_predictor_noise=0.8).dispatch(batch)
        return [r.engine for r in batch]

    assert assignment(1) == assignment(1)
    assert assignment(1) != assignment(2)


def test_an_engine_that_runs_dry_steals_queued_rollouts_from_the_busiest():
    env = simpy.Environment()
    engines = make_engines(env, 2, seqs=1)
    work = dispatcher(engines, "work_stealing")
    batch = rollouts([10] * 6)
    for r in batch:
        engines[0].submit(r)  # all of it lands on one engine
    # The idle engine takes from the back of the queue what it can start now: one sequence slot.
    assert work.rebalance() == 1
    assert [r.engine for r in batch] == [0, 0, 0, 0, 0, 1]
    env.run()
    # Each time it runs dry it steals again: three rollouts of 10.1 s in turn on each engine.
    assert [r.engine for r in batch] == [0, 0, 0, 1, 1, 1]
    assert max(r.finished for r in batch) == pytest.approx(3 * 10.1)


def test_stealing_happens_as_engines_run_dry_without_the_controller():
    env = simpy.Environment()
    engines = make_engines(env, 2, seqs=1)
    dispatcher(engines, "work_stealing")
    batch = rollouts([10] * 6)
    for r in batch:
        engines[0].submit(r)
    env.run()
    assert {r.engine for r in batch} == {0, 1}
    alone = simpy.Environment()
    (single,) = make_engines(alone, 1, seqs=1)
    for r in rollouts([10] * 6):
        single.submit(r)
    alone.run()
    assert max(r.finished for r in batch) < 0.6 * alone.now


def test_policies_that_do_not_steal_leave_queues_alone():
    env = simpy.Environment()
    engines = make_engines(env, 2, seqs=1)
    work = dispatcher(engines, "least_requests")
    for r in rollouts([10] * 6):
        engines[0].submit(r)
    assert work.rebalance() == 0 and engines[0].queued == 6


def run_policy(balancer: str, placement: str, mode: str, seed: int) -> list[tuple[int, float]]:
    """Groups arriving over time on 3 engines of a real cost model, a small KV cache: (engine, finish) per rollout."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    recorder = Recorder(3)
    engines = [RolloutEngine(env, i, real_costs(), 3000, 4, 256, i, 1, recorder, lambda r: None, mode=mode)
               for i in range(3)]
    work = dispatcher(engines, balancer, seed, length_predictor_noise=0.3, group_placement=placement)
    arrivals = np.cumsum(rng.exponential(0.1, 12))
    prompts = rng.integers(20, 300, len(arrivals))
    groups = [[Rollout(g * 3 + i, g, int(prompts[g]), int(t), False, float(at))
               for i, t in enumerate(np.clip(rng.lognormal(5, 1, 3), 1, 2000))] for g, at in enumerate(arrivals)]

    def arrive():
        for group in groups:
            yield env.timeout(group[0].submitted - env.now)
            work.dispatch(group)

    env.process(arrive())
    env.run()
    return [(r.engine, r.finished) for group in groups for r in group]


@pytest.mark.parametrize("placement", ["together", "spread"])
@pytest.mark.parametrize("balancer", sorted(BALANCERS))
def test_every_policy_places_and_times_alike_in_fast_and_exact_modes(balancer, placement):
    """Load figures count completed iterations in both modes, so policies reading them mid-run choose alike."""
    for seed in range(2):
        fast, exact = run_policy(balancer, placement, "fast", seed), run_policy(balancer, placement, "exact", seed)
        assert [e for e, _ in fast] == [e for e, _ in exact]
        assert [t for _, t in fast] == pytest.approx([t for _, t in exact], rel=1e-9)
