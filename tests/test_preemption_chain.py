"""Preemption chains (rlsim.sim.engine.preemption_chain): booked in one event, they must leave every trace the
boundary-by-boundary path leaves, to the bit. An engine with a probe books each boundary at its own event (the probe
must see each at its time), so the same engine with a probe that records nothing is the reference."""
from __future__ import annotations

from collections.abc import Callable, Generator

import pytest
import simpy

from rlsim.sim.recorder import Recorder
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import MultiTurnRollout, Rollout
from rlsim.workload.multiturn import Turn
from tests.test_sim_rollout import Scenario, by_engine, random_scenario, real_costs


def run(scenario: Scenario, chains: bool, observe_every: float | None = None,
        meddler: Callable[[simpy.Environment, list[RolloutEngine]], Generator] | None = None) -> tuple[dict, int]:
    """Everything the run leaves (per rollout, samples, spans, counters) and its event count. `observe_every`: a
    process that reads every engine's load figures that often (a balancer), mid-chain as much as anywhere;
    `meddler`: a process given the engines, which it may change as the controller does (work stealing)."""
    env, costs = simpy.Environment(), real_costs()
    recorder = Recorder(scenario.engines)
    probe = None if chains else (lambda event, rollout: None)
    engines = [RolloutEngine(env, i, costs, scenario.kv, scenario.seqs, scenario.batched, i, 1, recorder,
                             lambda r: None, prefix_sharing=scenario.sharing, probe=probe,
                             admission=scenario.admission, order=scenario.order)
               for i in range(scenario.engines)]
    rollouts = [Rollout(i, g, p, t, False, at) for i, (g, p, t, _, at) in enumerate(scenario.rollouts)]
    factors = scenario.predicted or [1.0] * len(rollouts)
    loads: list[tuple] = []

    def arrivals():
        for r, (_, _, _, e, at), factor in sorted(zip(rollouts, scenario.rollouts, factors, strict=True),
                                                  key=lambda x: x[1][4]):
            yield env.timeout(max(0.0, at - env.now))
            engines[e].submit(r, r.target_tokens * factor)

    def weight_updates():
        for version, (at, how, seconds) in enumerate(scenario.pauses, start=1):
            yield env.timeout(max(0.0, at - env.now))
            yield simpy.AllOf(env, [e.pause(how) for e in engines])
            yield env.timeout(seconds)
            for e in engines:
                e.resume(version)

    def balancer():
        while env.now < 3.0:
            yield env.timeout(observe_every)
            loads.append([(e.queued, e.running, e.queued_tokens, e.kv_used_tokens, e.predicted_work, e.preemptions)
                          for e in engines])

    env.process(arrivals())
    env.process(weight_updates())
    if observe_every is not None:
        env.process(balancer())
    if meddler is not None:
        env.process(meddler(env, engines))
    events = 0
    while env.peek() < float("inf"):
        env.step()
        events += 1
    for engine in engines:
        engine.close()
    log = recorder.freeze(env.now, events)
    return {
        "rollouts": [(r.finished, r.generated, r.preemptions, r.admissions, r.admitted, r.version_started, r.engine)
                     for r in rollouts],
        # Per engine: a chain's samples are appended when it is booked, after other engines' later ones.
        "samples": by_engine(log.engine_samples),
        "spans": list(log.spans),
        "preemptions": [e.preemptions for e in engines],
        "cached_prefill_tokens": [e.cached_prefill_tokens for e in engines],
        "queued_tokens": [e.queued_tokens for e in engines],
        "loads": loads,
    }, events


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("observe_every", [None, 0.0137])
def test_a_chain_books_what_boundary_by_boundary_booking_books(seed, observe_every):
    scenario = random_scenario(seed)
    chained, chained_events = run(scenario, chains=True, observe_every=observe_every)
    stepped, stepped_events = run(scenario, chains=False, observe_every=observe_every)
    assert chained == stepped
    assert chained_events <= stepped_events


def test_chains_save_an_event_per_preemption_under_a_full_cache():
    """Many long sequences on a cache that holds a few: nearly every preemption is booked inside a chain."""
    scenario = Scenario(1, [(g, 100, 1500 + 37 * g, 0, 0.0) for g in range(12)], kv=4000, seqs=12, batched=2048,
                        sharing=True)
    chained, chained_events = run(scenario, chains=True)
    stepped, stepped_events = run(scenario, chains=False)
    assert chained == stepped
    preemptions = chained["preemptions"][0]
    assert preemptions >= 20
    assert stepped_events - chained_events >= preemptions // 2


def test_a_chain_evicts_released_contexts_as_boundary_by_boundary_booking_does():
    """Trajectories that released their slots for a long tool call leave their contexts cached; ten long sequences
    then fill the cache, and the chain's boundaries evict those contexts (least recently released first) as the
    batch grows, where booking each boundary at its time evicts them. When the trajectories return, nothing of
    theirs is cached any more."""
    def run(chains: bool) -> tuple[dict, int]:
        env = simpy.Environment()
        recorder = Recorder(1)
        engine = RolloutEngine(env, 0, real_costs(), 4000, 12, 2048, 0, 1, recorder, lambda r: None,
                               probe=None if chains else (lambda event, rollout: None), tool_wait="release")
        trajectories = [MultiTurnRollout(i, i, 100, 60, False, 0.0, turns=(Turn(50, (30.0,), 20), Turn(10)))
                        for i in range(3)]
        rollouts = trajectories + [Rollout(3 + g, 3 + g, 100, 1500 + 37 * g, False, 0.0) for g in range(10)]
        for rollout in rollouts:
            engine.submit(rollout)
        events = 0
        while env.peek() < float("inf"):
            env.step()
            events += 1
        engine.close()
        log = recorder.freeze(env.now, events)
        return {
            "rollouts": [(r.finished, r.generated, r.preemptions, r.admissions) for r in rollouts],
            "samples": by_engine(log.engine_samples),
            "spans": list(log.spans),
            "cached_prefill_tokens": engine.cached_prefill_tokens,
            "preemptions": engine.preemptions,
        }, events

    chained, chained_events = run(chains=True)
    stepped, stepped_events = run(chains=False)
    assert chained == stepped
    assert chained["cached_prefill_tokens"] == 0
    assert chained["preemptions"] >= 10
    assert chained_events < stepped_events
