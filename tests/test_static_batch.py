"""HF-generate rollout engines (static batches): exact traces of tiny cases with fixed costs, the fast advance against
the iteration-by-iteration reference on random cases, and the event count's independence of lengths."""
from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import MultiTurnRollout, Rollout
from rlsim.sim.static_batch import StaticBatchEngine
from rlsim.workload.multiturn import Turn
from tests.test_sim_rollout import (
    PAUSE_MODES,
    CountingEnvironment,
    FixedCosts,
    assert_same_samples,
    drive,
    real_costs,
)


def static_engines(env, count, costs, *, kv=10_000, seqs=4, max_new=100, mode="fast", log=None):
    recorder = Recorder(count)
    probe = None
    if log is not None:
        def probe(event, r):
            log.append((event, r.seq_id, round(env.now, 9)))
    engines = [StaticBatchEngine(env, i, costs, kv, seqs, max_new, i, 1, recorder, lambda r: None, mode=mode,
                                 probe=probe) for i in range(count)]
    return engines, recorder


# ---- exact traces of tiny cases ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_batch_is_padded_decodes_to_its_longest_and_returns_whole(mode):
    """Two rows padded to the longer prompt (20) prefill together, 1 s + 10 ms × 2 × 20 tokens; the batch decodes until
    its longest response (5 tokens: 4 steps after the prefill's) ends, and both rows return then. The third rollout,
    queued meanwhile, waits for the next batch: no admission inside one."""
    env = simpy.Environment()
    costs = FixedCosts()
    log: list = []
    (engine,), _ = static_engines(env, 1, costs, seqs=2, mode=mode, log=log)
    first, second, third = Rollout(0, 0, 10, 3, False, 0.0), Rollout(1, 1, 20, 5, False, 0.0), Rollout(2, 2, 5, 2, False, 0.0)
    for r in (first, second):
        engine.submit(r)

    def late():
        yield env.timeout(2.0)
        engine.submit(third)

    env.process(late())
    env.run()
    assert [c.tokens for c in costs.prefills[0]] == [20, 20]
    assert first.finished == second.finished == pytest.approx(5.4)
    assert third.finished == pytest.approx(5.4 + 1.05 + 1.0)
    assert (first.generated, second.generated, third.generated) == (3, 5, 2)
    assert [e for e in log if e[0] == "finished"] == [("finished", 0, 5.4), ("finished", 1, 5.4), ("finished", 2, 7.45)]


def test_a_framework_that_pads_to_the_maximum_prompt_prefills_and_reserves_that_much():
    """DeepSpeed-Chat and verl pad every prompt to the maximum prompt length (placement.rollout.pad_prompts
    max_prompt_tokens): a 10-token prompt is prefilled, and cached, as 64."""
    env = simpy.Environment()
    costs = FixedCosts()
    engine = StaticBatchEngine(env, 0, costs, 10_000, 4, 100, 0, 1, Recorder(1), lambda r: None, padded_prompt=64)
    short = Rollout(0, 0, 10, 3, False, 0.0)
    engine.submit(short)
    env.run()
    assert [c.tokens for c in costs.prefills[0]] == [64]
    assert short.finished == pytest.approx(1.64 + 2.0)


def test_the_kv_budget_limits_the_rows_of_a_batch():
    """Each row reserves the batch's longest prompt plus max_new_tokens: 3 × (20 + 100) tokens do not fit 300, so
    the first batch has two rows and the third rollout runs alone after it."""
    env = simpy.Environment()
    (engine,), _ = static_engines(env, 1, FixedCosts(), kv=300, seqs=8, max_new=100)
    rollouts = [Rollout(i, i, 20, 4, False, 0.0) for i in range(3)]
    for r in rollouts:
        engine.submit(r)
    env.run()
    assert rollouts[0].finished == rollouts[1].finished < rollouts[2].finished
    assert rollouts[0].admitted == rollouts[1].admitted == 0.0 < rollouts[2].admitted


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("how", PAUSE_MODES)
def test_every_pause_waits_for_the_batch_under_way(mode, how):
    """generate() returns only with its whole batch: a pause of any kind is taken once the batch is done, and the
    queued rollout starts after resume, on the new weights."""
    env = simpy.Environment()
    (engine,), _ = static_engines(env, 1, FixedCosts(), seqs=1, mode=mode)
    first, second = Rollout(0, 0, 10, 5, False, 0.0), Rollout(1, 1, 10, 5, False, 0.0)
    engine.submit(first)
    engine.submit(second)
    taken = []

    def weight_update():
        yield env.timeout(1.5)
        yield engine.pause(how)
        taken.append(env.now)
        yield env.timeout(10.0)
        engine.resume(1)

    env.process(weight_update())
    env.run()
    assert taken == [pytest.approx(first.finished)] and first.generated == 5
    assert second.admitted == pytest.approx(first.finished + 10.0) and second.version_started == 1


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_multi_turn_trajectory_ends_its_turn_with_the_batch_and_prefills_whole_after_its_tools(mode):
    """The turn ends when the batch does; after the tool call (3 s, 7 tokens) the trajectory queues again and its
    next batch prefills its whole context: prompt, first turn and tool response."""
    env = simpy.Environment()
    costs = FixedCosts()
    (engine,), _ = static_engines(env, 1, costs, mode=mode)
    agent = MultiTurnRollout(0, 0, 10, 6, False, 0.0, turns=(Turn(2, (3.0,), 7), Turn(4)))
    engine.submit(agent)
    env.run()
    assert [c.tokens for chunks in costs.prefills for c in chunks] == [10, 10 + 2 + 7]
    assert agent.generated == 6 and engine.tool_calls == 1
    assert agent.finished == pytest.approx(1.1 + 1.0 + 3.0 + 1.19 + 3.0)


# ---- fast advance against the reference ----------------------------------------------------------------------------

def run_case(seed: int, mode: str, scale: int = 1):
    rng = np.random.default_rng(seed)
    env = CountingEnvironment()
    count = int(rng.integers(1, 3))
    engines, recorder = static_engines(env, count, real_costs(), kv=int(rng.choice([3000, 20_000])),
                                       seqs=int(rng.integers(1, 9)), max_new=1500 * scale, mode=mode)
    rollouts = [Rollout(i, i, int(rng.integers(5, 400)), int(min(1500, rng.lognormal(np.log(150), 1.0))) * scale,
                        False, float(rng.exponential(0.3))) for i in range(int(rng.integers(2, 20)))]
    pauses = sorted((float(rng.uniform(0.05, 1.5)), str(rng.choice(PAUSE_MODES)), 0.0)
                    for _ in range(int(rng.integers(0, 3))))
    drive(env, engines, [(r, r.seq_id % count) for r in rollouts], pauses)
    for engine in engines:
        engine.close()
    return rollouts, recorder.freeze(env.now, env.events), env.events


@pytest.mark.parametrize("seed", range(12))
def test_fast_advance_agrees_with_stepping_every_iteration(seed):
    (fast, fast_log, fast_events), (exact, exact_log, exact_events) = run_case(seed, "fast"), run_case(seed, "exact")
    assert [r.finished for r in fast] == pytest.approx([r.finished for r in exact], rel=1e-12)
    assert [r.generated for r in fast] == [r.generated for r in exact] == [r.target_tokens for r in exact]
    assert [r.version_started for r in fast] == [r.version_started for r in exact]
    spans = [[(s.first_gpu, s.label, s.start, s.end) for s in log.spans] for log in (fast_log, exact_log)]
    assert [s[:2] for s in spans[0]] == [s[:2] for s in spans[1]]
    assert [t for s in spans[0] for t in s[2:]] == pytest.approx([t for s in spans[1] for t in s[2:]], rel=1e-12)
    assert_same_samples(fast_log.engine_samples, exact_log.engine_samples)
    assert fast_events <= exact_events


def test_event_count_does_not_grow_with_response_length():
    """Responses 8 times longer take as many events, but for arrivals and pauses that now meet a batch under way."""
    short, long = run_case(3, "fast")[2], run_case(3, "fast", scale=8)[2]
    assert abs(long - short) <= 2
    assert run_case(3, "exact", scale=8)[2] > 20 * long


# ---- invariants over random small cases ----------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 60)), min_size=1, max_size=12),
    kv_slack=st.integers(0, 200),
    seqs=st.integers(1, 6),
)
def test_every_rollout_finishes_with_its_tokens_and_the_padded_cache_never_overflows(lengths, kv_slack, seqs):
    """Rows reserve the longest prompt plus max_new_tokens (60, the longest response), so the padded cache a batch
    grows never exceeds the budget, however prompts and responses mix."""
    kv = max(prompt for prompt, _ in lengths) + 60 + kv_slack
    finishes = []
    for mode in ("fast", "exact"):
        env = CountingEnvironment()
        (engine,), _ = static_engines(env, 1, FixedCosts(), kv=kv, seqs=seqs, max_new=60, mode=mode)
        overflow = []
        env.after_step = lambda engine=engine, overflow=overflow: overflow.append(
            engine.kv_used_tokens > engine.kv_capacity_tokens)
        rollouts = [Rollout(i, i, prompt, target, False, 0.0) for i, (prompt, target) in enumerate(lengths)]
        for rollout in rollouts:
            engine.submit(rollout)
        env.run()
        assert not any(overflow)
        assert [r.generated for r in rollouts] == [target for _, target in lengths]
        finishes.append([r.finished for r in rollouts])
    assert finishes[0] == pytest.approx(finishes[1], rel=1e-12)
