"""Length-predicted priority inside the engine (`placement.rollout.scheduling_policy`, rlsim/sim/engine/queue_order.py):
the order a queue is served in, re-prediction from a rollout's progress, the fast mode's agreement with stepping every
iteration (the planners' own tests, ranked), and the effect on a synchronous step and on mean latency against the
papers. The invariants over random scenarios with a ranked queue are in tests/test_sim_rollout.py and
tests/test_sim_loop.py."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import simpy

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import ScenarioError
from rlsim.estimate import estimate_step
from rlsim.sim.engine.queue_order import repredicted_remaining
from rlsim.sim.recorder import Recorder
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from tests.sim_scenarios import scenario_yaml
from tests.test_long_tail import measured_seconds_per_step, paper_run
from tests.test_preemption_chain import run
from tests.test_prefill_run import long_prompts
from tests.test_sim_rollout import (
    Scenario,
    assert_fast_matches_exact,
    mispredicted,
    random_scenario,
    real_costs,
    simulate,
)

RANKED = ["longest_predicted_first", "shortest_predicted_first"]


def ranked(scenario: Scenario, order: str, seed: int, noise: float) -> Scenario:
    """The scenario with its engines' queues in `order`, each rollout predicted at its length times
    exp(noise·N(0,1))."""
    return dataclasses.replace(mispredicted(scenario, seed, noise), order=order)


def service_order(order: str, rollouts: list[Rollout], predicted: list[float]) -> list[int]:
    """The ids of `rollouts` in the order one engine with one sequence slot serves them, all queued at once."""
    env = simpy.Environment()
    served: list[int] = []
    engine = RolloutEngine(env, 0, real_costs(), 100_000, 1, 2048, 0, 1, Recorder(1), lambda r: served.append(r.seq_id),
                           order=order)
    for rollout, tokens in zip(rollouts, predicted, strict=True):
        engine.submit(rollout, tokens)
    env.run()
    return served


# ---- the order -------------------------------------------------------------------------------------------------

def test_a_ranked_queue_is_served_by_predicted_remaining_tokens():
    lengths = [300, 50, 900, 50, 120]
    rollouts = lambda: [Rollout(i, i, 20, t, False, 0.0) for i, t in enumerate(lengths)]  # noqa: E731
    exact = [float(t) for t in lengths]
    assert service_order("fcfs", rollouts(), exact) == [0, 1, 2, 3, 4]
    # Equal predictions keep their order of arrival.
    assert service_order("longest_predicted_first", rollouts(), exact) == [2, 0, 4, 1, 3]
    assert service_order("shortest_predicted_first", rollouts(), exact) == [1, 3, 4, 0, 2]
    # The order follows the predictions, not the true lengths: the 900-token rollout predicted at 90 goes last.
    assert service_order("longest_predicted_first", rollouts(), [300, 50, 90, 50, 120]) == [0, 4, 2, 1, 3]


def test_a_rollout_is_re_predicted_from_its_progress_when_it_queues():
    """A carried-over (or preempted) rollout ranks by what it has left, re-predicted with its own error factor: 1,000
    tokens with 900 generated rank below 400 fresh ones, under a predictor that overestimates everything twice."""
    carried = Rollout(0, 0, 20, 1000, False, 0.0, generated=900)
    fresh = Rollout(1, 1, 20, 400, False, 0.0)
    assert repredicted_remaining(carried, 2000.0) == pytest.approx(200.0)
    assert repredicted_remaining(fresh, 800.0) == pytest.approx(800.0)
    assert service_order("longest_predicted_first", [carried, fresh], [2000.0, 800.0]) == [1, 0]
    carried, fresh = Rollout(0, 0, 20, 1000, False, 0.0, generated=900), Rollout(1, 1, 20, 400, False, 0.0)
    assert service_order("shortest_predicted_first", [carried, fresh], [2000.0, 800.0]) == [0, 1]


# ---- fast mode = stepping every iteration ----------------------------------------------------------------------

@pytest.mark.parametrize("order", RANKED)
@pytest.mark.parametrize("seed", range(16))
def test_fast_mode_agrees_with_stepping_every_iteration(seed, order):
    admission = "past_future" if seed % 4 == 3 else "current_kv"
    scenario = dataclasses.replace(ranked(random_scenario(seed), order, seed, noise=(0.0, 0.5, 1.0)[seed % 3]),
                                   admission=admission)
    assert_fast_matches_exact(scenario)


@pytest.mark.parametrize("order", RANKED)
@pytest.mark.parametrize("seed", range(12))
def test_a_ranked_engine_books_what_boundary_by_boundary_booking_books(seed, order):
    """tests/test_preemption_chain.py's comparison, ranked: the planned boundaries (prefill runs; a ranked queue
    books each preemption as it comes, its head not being the last victim) against an engine whose probe books each
    boundary at its own event, read mid-run by a balancer too."""
    scenario = ranked(random_scenario(seed), order, seed, noise=0.5)
    planned, planned_events = run(scenario, chains=True, observe_every=0.0137)
    stepped, stepped_events = run(scenario, chains=False, observe_every=0.0137)
    assert planned == stepped
    assert planned_events <= stepped_events


@pytest.mark.parametrize("order", RANKED)
@pytest.mark.parametrize("how", ["drain", "interrupt", "hold"])
def test_a_prefill_run_in_a_ranked_engine_books_what_the_step_by_step_path_books(order, how):
    """tests/test_prefill_run.py's long prompts, ranked, with a pause landing inside a run; runs still save events."""
    scenario = ranked(long_prompts(4, pauses=[(0.003, how, 0.002)]), order, 7, noise=0.5)
    planned, planned_events = run(scenario, chains=True, observe_every=0.00037)
    stepped, stepped_events = run(scenario, chains=False, observe_every=0.00037)
    assert planned == stepped
    assert stepped_events - planned_events >= 8 * 6


def test_a_rollout_that_outranks_the_queue_wakes_a_decoding_engine():
    """First come, first served, a rollout submitted behind a head that does not fit waits; ranked first, it is the
    head, and if it fits it is admitted at the next boundary, in the fast mode as in the exact one."""
    # The long prompt's rollout (1) does not fit beside the running one (0) until it ends; the late one (2) does.
    rollouts = [(0, 100, 3000, 0, 0.0), (1, 3150, 10, 0, 0.0), (2, 10, 20, 0, 0.05)]
    for order, admitted_first in (("fcfs", False), ("longest_predicted_first", True)):
        scenario = Scenario(1, rollouts, kv=3200, seqs=4, batched=4096, sharing=True, order=order)
        fast, exact = simulate(scenario, "fast"), simulate(scenario, "exact")
        assert fast.finished == pytest.approx(exact.finished, rel=1e-9)
        # The short late rollout ends before the long prompt's rollout only when it jumps the queue.
        assert (fast.finished[2] < fast.finished[1]) is admitted_first


# ---- the effect ------------------------------------------------------------------------------------------------

def burst(order: str, noise: float, kv: int) -> Scenario:
    """One engine, 32 GRPO groups of 8 long-tailed reasoning responses (median 1,500 tokens, σ 0.8) on 300-token
    prompts, all submitted at once, 64 sequence slots: a synchronous step's rollout on one engine."""
    rng = np.random.default_rng(0)
    rollouts = [(g, 300, int(t), 0, 0.0) for g in range(32)
                for t in np.clip(rng.lognormal(np.log(1500), 0.8, 8), 16, 16_000)]
    return ranked(Scenario(1, rollouts, kv=kv, seqs=64, batched=2048, sharing=True), order, 1, noise)


def mean_completion(outcome) -> float:
    return float(np.mean(list(outcome.finished.values())))


@pytest.mark.parametrize("noise", [0.0, 0.5, 1.0])
def test_longest_predicted_first_shortens_a_synchronous_rollout(noise):
    """An RL step waits for its last response. With more rollouts than slots, first come, first served starts the
    longest whenever its turn comes, often in a late wave, and it becomes the step's tail; longest predicted first
    starts it at once (Graham's LPT rule). rlsim: the rollout ends ~20 % sooner with room in the cache, whatever the
    predictor's error up to σ = 1 (the longest responses are far enough out to rank first anyway), and 1.5–7 %
    sooner under memory pressure, where the long responses started together preempt each other. Mean latency, which
    an RL step does not wait on, is what it pays: ~1.2–2.2× longer."""
    fcfs_roomy, fcfs_tight = simulate(burst("fcfs", noise, 200_000), "fast"), simulate(burst("fcfs", noise, 40_000), "fast")
    roomy = simulate(burst("longest_predicted_first", noise, 200_000), "fast")
    tight = simulate(burst("longest_predicted_first", noise, 40_000), "fast")
    assert 0.75 < roomy.makespan / fcfs_roomy.makespan < 0.85
    assert 0.9 < tight.makespan / fcfs_tight.makespan < 0.99
    assert 1.15 < mean_completion(roomy) / mean_completion(fcfs_roomy) < 1.5
    assert 1.8 < mean_completion(tight) / mean_completion(fcfs_tight) < 2.3


@pytest.mark.parametrize("noise", [0.0, 0.5, 1.0])
def test_shortest_predicted_first_cuts_mean_latency_as_learning_to_rank_reports(noise):
    """Learning to Rank (Fu et al., NeurIPS 2024, arXiv 2408.15792) approximates shortest-job-first in vLLM: 2.8×
    lower latency than first come, first served in chatbot serving. rlsim, on one burst under memory pressure (the
    paper's high load): 1.5–1.9× lower mean completion time, falling with the predictor's error (σ 0 to 1; the paper's
    ranker is a trained model, of Kendall's τ ~0.5–0.6), for a rollout that ends no sooner (5–15 % later). The paper's
    figure is per-token latency under a sustained Poisson stream, where head-of-line blocking compounds from request
    to request; one burst blocks each request once."""
    fcfs = simulate(burst("fcfs", noise, 40_000), "fast")
    short = simulate(burst("shortest_predicted_first", noise, 40_000), "fast")
    assert 1.45 < mean_completion(fcfs) / mean_completion(short) < 2.0
    assert 1.0 < short.makespan / fcfs.makespan < 1.2


def test_longest_predicted_first_shortens_a_synchronous_grpo_step():
    """The whole RL step: Qwen2.5-7B GRPO on 8 H800s, verl's synchronous step (256 prompts × 8 responses, 8K cap, a
    long tail correlated within groups), engines of 32 sequence slots. Longest predicted first makes steps 1.08–1.15×
    faster (generation is most of a step; training is unchanged). No paper isolates the queue order of RL rollouts;
    Seer's context-aware scheduling is one of three parts of its 74–97 % higher rollout throughput."""
    batch = "prompts_per_step: 256, samples_per_prompt: 8, max_response_tokens: 8192"
    workload = """  prompt_tokens: {kind: lognormal, median_tokens: 200, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 1500, sigma: 1.0}
  groups: {within_group_correlation: 0.5}"""
    seconds = {order: measured_seconds_per_step(paper_run("Qwen2.5-7B", 1, 1, batch, workload, "", 3, 0,
                                                          rollout=f", max_num_seqs: 32, scheduling_policy: {order}"), 0)
               for order in ("fcfs", "longest_predicted_first")}
    assert 1.08 < seconds["fcfs"] / seconds["longest_predicted_first"] < 1.15


def test_the_estimate_says_it_serves_queues_first_come_first_served():
    """The analytical estimate replays engines first come, first served; with a ranked queue it says so."""
    text = scenario_yaml(max_num_seqs=8).replace("max_num_seqs: 8}", "max_num_seqs: 8, scheduling_policy: "
                                                 "longest_predicted_first}")
    ranked_gen = next(s for s in estimate_step(bind(parse_scenario(text))).stages if s.name == "gen")
    plain_gen = next(s for s in estimate_step(bind(parse_scenario(scenario_yaml(max_num_seqs=8)))).stages
                     if s.name == "gen")
    assert "not longest_predicted_first" in ranked_gen.note and "longest_predicted_first" not in plain_gen.note
    assert ranked_gen.seconds == plain_gen.seconds


# ---- refused where it is not modelled ---------------------------------------------------------------------------

@pytest.mark.parametrize(("rollout", "words"), [
    (", scheduling_policy: longest_first", ["longest_predicted_first", "did you mean"]),
    (", engine: hf, scheduling_policy: shortest_predicted_first", ["static batch", "fcfs"]),
])
def test_bad_queue_orders_are_refused_at_their_field(rollout, words):
    text = scenario_yaml(max_num_seqs=8).replace("max_num_seqs: 8}", f"max_num_seqs: 8{rollout}}}")
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text)
    message = str(err.value)
    assert "placement.rollout.scheduling_policy" in message
    for word in words:
        assert word in message


def test_a_queue_order_with_prefill_engines_is_refused():
    text = scenario_yaml(mode="disaggregated", rollout_gpus=2, training_gpus=4, prefill="gpus: 2").replace(
        "prefill: {gpus: 2}", "prefill: {gpus: 2}, scheduling_policy: longest_predicted_first")
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text)
    assert "placement.rollout.scheduling_policy" in str(err.value)
    assert "prefill" in str(err.value)
