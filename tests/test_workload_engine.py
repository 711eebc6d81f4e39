"""Multi-turn trajectories in the rollout engine: exact traces of tool calls under both tool-wait policies, prefix-cache
hits and evictions, interrupts during tool calls, the fast advance against the iteration-by-iteration reference on
random trajectories, and events that grow with turns, never with tokens."""
from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.sequence import MultiTurnRollout
from rlsim.workload.multiturn import Turn
from tests.test_sim_rollout import CountingEnvironment, FixedCosts, assert_same_samples, engines_on, real_costs


def trajectory(seq_id: int, prompt: int, turns: list[Turn], group: int | None = None) -> MultiTurnRollout:
    return MultiTurnRollout(seq_id, seq_id if group is None else group, prompt, sum(t.tokens for t in turns), False,
                            0.0, turns=tuple(turns))


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("policy", ["hold", "release"])
def test_a_tool_call_pauses_the_trajectory_and_its_return_prefills_the_tool_tokens(mode, policy):
    """Prompt 10, a turn of 3 tokens, a 2.5 s search appending 20 tokens, an answer of 2 tokens. Either way the
    context up to the turn's last token is found in the cache (held, or released and still cached), so the return
    prefills that last token and the 20 tool tokens: 1 s + 0.21 s."""
    env, log = simpy.Environment(), []
    engines, recorder = engines_on(env, 1, FixedCosts(), mode=mode, log=log)
    engines[0].tool_wait = engines[0].tool_wait if policy == "hold" else _release()
    a = trajectory(0, 10, [Turn(3, (2.5,), 20), Turn(2)])
    engines[0].submit(a)
    env.run()
    samples = recorder.freeze(env.now, 0).engine_samples
    expected = [("admitted", 0, 0, 0.0), ("prefilled", 0, 0, 1.1), ("tool_call", 0, 0, 3.1),
                ("tool_returned", 0, 0, 5.6)]
    if policy == "release":
        expected.append(("admitted", 0, 0, 5.6))
    expected += [("prefilled", 0, 0, 6.81), ("finished", 0, 0, 7.81)]
    assert log == expected
    assert a.generated == 5 and a.appended == 20 and a.context_tokens == 35
    assert engines[0].tool_calls == 1
    assert engines[0].kv_used_tokens == 0
    # Samples (time, running, waiting, KV tokens, decode batch): the tool call leaves the decode batch and, under
    # release, the engine; the return brings the context back (13 + 20 tokens and the next token's slot).
    trace = [(round(s.time, 9), s.running, s.waiting, s.kv_tokens, s.decoding) for s in samples]
    held = policy == "hold"
    middle = [(3.1, 1, 0, 13, 0)] if held else [(3.1, 0, 0, 0, 0), (5.6, 0, 1, 0, 0)]
    assert trace == [(0.0, 0, 1, 0, 0), (0.0, 1, 0, 11, 0), (1.1, 1, 0, 11, 1)] + middle + [
        (5.6, 1, 0, 34, 0), (6.81, 1, 0, 34, 1), (7.81, 0, 0, 0, 0)]
    assert (a.admitted, a.admissions) == (0.0, 1 if held else 2)


def _release():
    from rlsim.sim.rollout import TOOL_WAIT_POLICIES

    return TOOL_WAIT_POLICIES["release"]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_releasing_the_slot_lets_another_sequence_run_during_the_tool_call(mode):
    finish = {}
    for policy in ("hold", "release"):
        env = simpy.Environment()
        engines, _ = engines_on(env, 1, FixedCosts(), seqs=1, mode=mode)
        if policy == "release":
            engines[0].tool_wait = _release()
        a = trajectory(0, 10, [Turn(2, (20.0,), 5), Turn(2)])
        b = trajectory(1, 10, [Turn(5)])
        engines[0].submit(a)
        engines[0].submit(b)
        env.run()
        finish[policy] = (a.finished, b.finished)
    # Holding: B waits for all of A, tool call included. Releasing: B runs in A's tool call and is done long before.
    assert finish["hold"][1] > finish["hold"][0]
    assert finish["release"][1] < 10.0 < finish["release"][0]


def test_a_released_context_evicted_for_room_is_prefilled_again_in_full():
    env = simpy.Environment()
    # Cache of 60 tokens: A (prompt 10 + 3 + 20 + 2) fits alone; B growing to 50 tokens needs A's released context.
    engines, _ = engines_on(env, 1, FixedCosts(), kv=60, seqs=2)
    engine = engines[0]
    engine.tool_wait = _release()
    a = trajectory(0, 10, [Turn(3, (40.0,), 20), Turn(2)])  # its search outlasts all of B
    b = trajectory(1, 20, [Turn(30)])
    engine.submit(a)

    def later():
        yield env.timeout(4.0)  # A is in its tool call
        engine.submit(b)

    env.process(later())
    env.run()
    assert a.done and b.done
    # Nothing was found cached: A's context (10 + 3 + 20 tokens) was prefilled from scratch when it came back.
    assert engine.cached_prefill_tokens == 0
    assert engine.preemptions == 0


def test_a_released_context_still_cached_is_reused():
    env = simpy.Environment()
    engines, _ = engines_on(env, 1, FixedCosts(), kv=10_000, seqs=2)
    engines[0].tool_wait = _release()
    a = trajectory(0, 10, [Turn(3, (5.0,), 20), Turn(4, (1.0,), 7), Turn(2)])
    engines[0].submit(a)
    env.run()
    # Turn 2 found 10 + 3 − 1 tokens cached, turn 3 found 10 + 3 + 20 + 4 − 1.
    assert engines[0].cached_prefill_tokens == 12 + 36


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_an_interrupt_during_a_held_tool_call_frees_the_slot_and_the_trajectory_recomputes_after(mode):
    env = simpy.Environment()
    engines, _ = engines_on(env, 1, FixedCosts(), mode=mode)
    engine = engines[0]
    a = trajectory(0, 10, [Turn(3, (4.0,), 20), Turn(2)])
    engine.submit(a)

    def weight_update():
        yield env.timeout(4.0)  # A's tool call runs from 3.1 to 7.1
        yield engine.pause("interrupt")
        assert engine.kv_used_tokens == 0 and engine.running == 0
        yield env.timeout(1.0)
        engine.resume(1)

    env.process(weight_update())
    env.run()
    assert a.done and a.appended == 20
    assert engine.interruptions == 1
    # Its KV was dropped, so the whole context (10 + 3 + 20 tokens, the last sampled from) is prefilled again.
    assert engine.cached_prefill_tokens == 0


# ---- fast advance against the reference ---------------------------------------------------------------------------


def run_trajectories(specs, mode: str, policy: str, kv: int, seqs: int, costs=None, sharing: bool = True,
                     samples: list | None = None):
    """Finish times, events and tool calls; `samples` (a list) receives the engines' samples."""
    env = CountingEnvironment()
    engines, recorder = engines_on(env, 2, costs or real_costs(), kv=kv, seqs=seqs, batched=256, mode=mode, sharing=sharing)
    for engine in engines:
        engine.tool_wait = _release() if policy == "release" else engine.tool_wait
    rollouts = [trajectory(i, prompt, turns, group) for i, (group, prompt, turns, _) in enumerate(specs)]
    overflow = []
    env.after_step = lambda: overflow.extend(e.index for e in engines if e.kv_used_tokens > e.kv_capacity_tokens)
    for r, (_, _, _, e) in zip(rollouts, specs, strict=True):
        engines[e].submit(r)
    env.run()
    assert not overflow
    assert all(r.done and r.generated == r.target_tokens for r in rollouts)
    if samples is not None:
        samples.extend(recorder.freeze(env.now, env.events).engine_samples)
    return {r.seq_id: r.finished for r in rollouts}, env.events, sum(e.tool_calls for e in engines)


def random_trajectories(rng: np.random.Generator, groups: int, scale: int = 1):
    specs = []
    for g in range(groups):
        prompt = int(rng.integers(10, 300))
        for _ in range(int(rng.integers(1, 4))):
            turns = [Turn(int(rng.integers(1, 80)) * scale, (float(rng.exponential(0.3)),),
                           int(rng.integers(1, 200)))
                     for _ in range(int(rng.integers(0, 4)))]
            turns.append(Turn(int(rng.integers(1, 150)) * scale))
            specs.append((g, prompt, turns, int(rng.integers(2))))
    return specs


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), policy=st.sampled_from(["hold", "release"]), tight=st.booleans(),
       seqs=st.sampled_from([1, 3, 16]), sharing=st.booleans())
def test_fast_advance_agrees_with_stepping_every_iteration_through_tool_calls(seed, policy, tight, seqs, sharing):
    specs = random_trajectories(np.random.default_rng(seed), 5)
    largest = max(p + sum(t.tokens + t.tool_tokens for t in turns) for _, p, turns, _ in specs)
    kv = largest + (40 if tight else 100_000)
    fast_samples, exact_samples = [], []
    fast, fast_events, fast_calls = run_trajectories(specs, "fast", policy, kv, seqs, sharing=sharing,
                                                     samples=fast_samples)
    exact, exact_events, exact_calls = run_trajectories(specs, "exact", policy, kv, seqs, sharing=sharing,
                                                        samples=exact_samples)
    assert fast == pytest.approx(exact, rel=1e-9)
    assert fast_calls == exact_calls == sum(len(turns) - 1 for _, _, turns, _ in specs)
    assert fast_events <= exact_events
    assert_same_samples(fast_samples, exact_samples)


def test_events_grow_with_turns_not_with_tokens():
    specs = random_trajectories(np.random.default_rng(3), 24)
    longer = random_trajectories(np.random.default_rng(3), 24, scale=8)
    short_samples, long_samples = [], []
    _, short_events, calls = run_trajectories(specs, "fast", "hold", 10**7, 64, samples=short_samples)
    _, long_events, _ = run_trajectories(longer, "fast", "hold", 10**7, 64, samples=long_samples)
    assert calls > 20
    assert long_events <= 1.1 * short_events
    assert len(long_samples) <= 1.1 * len(short_samples) and len(long_samples) <= long_events
