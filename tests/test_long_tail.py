"""The long-tail remedies (schedule.long_tail, rlsim/sim/long_tail/): each against its paper's headline, in the
paper's setting as closely as the model allows, and the mechanism that produces it; bad parameters refused at their
field. The invariants over random scenarios with a remedy are in tests/test_sim_loop.py."""
from __future__ import annotations

from collections import Counter

import pytest

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import ScenarioError
from rlsim.events import EventLog
from rlsim.metrics.sample_use import sample_use
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import bound, scenario_yaml


def paper_run(model: str, nodes: int, tp: int, algorithm: str, workload: str, long_tail: str, steps: int,
              warmup: int, rollout: str = "", training: str = "micro_batch_tokens: 16384") -> EventLog:
    text = f"""
name: long-tail
seed: 3
cluster: {{pools: [{{gpu: h800-sxm, nodes: {nodes}}}]}}
model: {model}
algorithm: {{name: grpo, {algorithm}, max_prompt_tokens: 2048}}
workload:
{workload}
placement:
  mode: colocated
  rollout: {{gpus: {nodes * 8}, tp: {tp}{rollout}}}
  training: {{{training}}}
schedule: {{mode: sync{f", long_tail: {long_tail}" if long_tail else ""}}}
run: {{steps: {steps}, warmup_steps: {warmup}}}
"""
    return simulate_log(bind(parse_scenario(text))).log


def measured_seconds_per_step(log: EventLog, warmup: int) -> float:
    steps = log.steps[warmup:]
    return sum(s.end - s.start for s in steps) / len(steps)


# ------------------------------------------------------------------------------------------------- RollPacker

# Qwen2.5 on H800s as RollPacker's §7 runs it (DeepMath-style math, 8K responses); the length model is ours: a
# lognormal tail whose hard prompts answer long in all their samples (within-group correlation 0.5).
ROLLPACKER_WORKLOAD = """  prompt_tokens: {kind: lognormal, median_tokens: 200, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 1500, sigma: 1.0}
  groups: {within_group_correlation: 0.5}"""
ROLLPACKER_BATCH = "prompts_per_step: 128, samples_per_prompt: 8, max_response_tokens: 8192"
# η = 1.25 defers (η - 1)·P0 prompts a short round, so every fifth step is a long round; three whole cycles.
CYCLES_OF_FIVE = 15


@pytest.mark.parametrize(("model", "nodes", "tp", "low", "high"), [
    ("Qwen2.5-7B", 2, 1, 1.22, 1.45), ("Qwen2.5-32B", 4, 4, 1.12, 1.35)])
def test_tail_batching_speeds_up_synchronous_training_over_verl(model, nodes, tp, low, high):
    """RollPacker (arXiv 2509.21009, Fig. 8-9): 2.03-2.56x end-to-end over veRL for Qwen2.5-7B to 32B on 16-128
    H800s. rlsim's tail batching alone, against verl's synchronous step on the same GPUs, gives 1.31x for 7B on 16
    H800s and 1.22x for 32B on 32: short rounds stop at the first P0 prompts with R0 responses (their generation is
    ~40 % shorter), and every fifth step is a long round of the deferred prompts (~1.5x a verl step). The paper's
    figure also holds RollPacker's other three parts, which rlsim does not model: the parallelism planner that
    regroups engines for the long rounds, the reward scheduler, and the stream trainer that trains a long round's
    early finishers while its tail still generates; the gap is theirs. Training (about a third of a verl step here)
    is the same in both."""
    verl = paper_run(model, nodes, tp, ROLLPACKER_BATCH, ROLLPACKER_WORKLOAD, "", CYCLES_OF_FIVE, 0)
    packed = paper_run(model, nodes, tp, ROLLPACKER_BATCH, ROLLPACKER_WORKLOAD, "{kind: tail_batching, eta: 1.25}",
                       CYCLES_OF_FIVE, 0)
    assert [s.samples for s in packed.steps] == [s.samples for s in verl.steps] == [128 * 8] * CYCLES_OF_FIVE
    speedup = measured_seconds_per_step(verl, 0) / measured_seconds_per_step(packed, 0)
    assert low <= speedup <= high
    # The long rounds are the slowest steps: every fifth, slower than any verl step, and the short ones faster.
    seconds = [s.end - s.start for s in packed.steps]
    long_rounds = sorted(range(CYCLES_OF_FIVE), key=lambda i: seconds[i])[-3:]
    assert sorted(long_rounds) == [4, 9, 14]
    slowest_verl = max(s.end - s.start for s in verl.steps)
    assert min(seconds[i] for i in long_rounds) > slowest_verl
    assert max(seconds[i] for i in range(CYCLES_OF_FIVE) if i not in long_rounds) < min(
        s.end - s.start for s in verl.steps)


def test_short_rounds_defer_the_slowest_prompts_and_long_rounds_train_exactly_them():
    """A short round launches η·P0 = 20 prompts of ⌈η·R0⌉ = 5 responses and trains the first 16 complete with 4
    responses each; the 4 aborted prompts queue, and the fifth step trains 16 of them again, 4 responses each."""
    log = simulate_log(bound(prompts=16, samples=4, steps=5, long_tail="{kind: tail_batching, eta: 1.25}",
                             response="{kind: lognormal, median_tokens: 400, sigma: 1.0}", max_response=4096,
                             workload="groups: {within_group_correlation: 0.6}")).log
    trained = [r for r in log.sequences if r.step_trained >= 0]
    per_step = Counter(r.step_trained for r in trained)
    assert per_step == {step: 64 for step in range(5)}
    groups_per_step = {step: {r.group for r in trained if r.step_trained == step} for step in range(5)}
    assert all(len(groups) == 16 for groups in groups_per_step.values())
    dropped = [r for r in log.sequences if r.dropped_by == "tail_batching"]
    # Four short rounds, each aborting 4 whole prompts (5 responses each) and one surplus response of each kept one.
    assert len(dropped) == 4 * (4 * 5 + 16 * 1)
    # An aborted prompt had fewer than R0 responses finished: at least two of its five were cut short.
    trained_groups = {r.group for r in trained}
    aborted = Counter(r.group for r in dropped if r.group not in trained_groups and r.finished < 0)
    assert len(aborted) == 16 and min(aborted.values()) >= 2
    long_round = [r for r in trained if r.step_trained == 4]
    # The prompts deferred are those slow to finish: the long round's responses are longer than the short rounds'.
    short_mean = sum(r.response_tokens for r in trained if r.step_trained < 4) / (4 * 64)
    assert sum(r.response_tokens for r in long_round) / 64 > 1.5 * short_mean


# ------------------------------------------------------------------------------------------------- UloRL

# Qwen3-30B-A3B with a 128k cap, as UloRL's §3 trains it; the lengths are ours: a lognormal with 84 % of responses
# under 64k (the paper's example: "80 % within 64k") and 5 % truncated at the cap.
ULORL_WORKLOAD = """  prompt_tokens: {kind: lognormal, median_tokens: 300, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 24000, sigma: 1.0}
  groups: {within_group_correlation: 0.5}"""
ULORL_BATCH = "prompts_per_step: 32, samples_per_prompt: 8, max_response_tokens: 131072"
ULORL_ROLLOUT = ", ep: 4, gpu_memory_utilization: 0.85"
ULORL_TRAINING = "backend: megatron, tp: 4, cp: 4, ep: 8, micro_batch_tokens: 16384"


def test_segment_rollout_speeds_up_ultra_long_outputs():
    """UloRL (arXiv 2507.19766, §2.1): 4 segments of a 128k cap train Qwen3-30B-A3B 2.06x as fast as 1 segment.
    rlsim, on 64 H800s colocated, 32 prompts x 8 responses: 1.34x per step. A round now waits for one 32k segment of
    the longest response instead of all 128k, but a GRPO group trains only once all 8 of its responses have ended,
    and with correlated lengths most groups hold a response past 32k, so a step gathers its 32 groups over two or
    three rounds. The paper does not publish its batch, response lengths or GPUs; a larger batch per round (more
    groups to choose the first 32 from) moves rlsim's figure toward the paper's."""
    verl = paper_run("Qwen3-30B-A3B", 8, 4, ULORL_BATCH, ULORL_WORKLOAD, "", 10, 2, ULORL_ROLLOUT, ULORL_TRAINING)
    segmented = paper_run("Qwen3-30B-A3B", 8, 4, ULORL_BATCH, ULORL_WORKLOAD,
                          "{kind: segment_rollout, segments: 4}", 10, 2, ULORL_ROLLOUT, ULORL_TRAINING)
    speedup = measured_seconds_per_step(verl, 2) / measured_seconds_per_step(segmented, 2)
    assert 1.2 <= speedup <= 2.3
    assert [s.samples for s in segmented.steps] == [32 * 8] * 10
    # Responses carried across rounds train with the weights of a later step: some staleness, none in verl.
    trained = [r for r in segmented.sequences if r.step_trained >= 0]
    assert max(r.staleness for r in trained) >= 1
    assert all(r.staleness == 0 for r in verl.sequences if r.step_trained >= 0)


def test_one_round_decodes_at_most_one_segment_of_each_response():
    """With 4 segments of a 1024-token cap (256 tokens a round), a response of 1000 tokens needs 4 rounds and is
    recomputed 3 times; every response trains whole, never cut at a segment's end."""
    log = simulate_log(bound(prompts=4, samples=2, steps=4, max_response=1024, long_tail="{kind: segment_rollout, "
                             "segments: 4}", response="{kind: fixed, tokens: 1000}")).log
    trained = [r for r in log.sequences if r.step_trained >= 0]
    assert trained and all(r.response_tokens == 1000 for r in trained)
    # Three carry-overs a response, each a readmission with its context recomputed.
    assert all(r.readmissions == 3 for r in trained)
    # Equal lengths leave no tail to remedy: every group needs the same four rounds, so every step waits for them.
    assert [s.stages["gen"] for s in log.steps] == pytest.approx([log.steps[0].stages["gen"]] * 4)


# ------------------------------------------------------------------------------------------------- DUET

# Qwen3-1.7B on MATH as DUET's §4 trains it, on one 8-GPU node; the lengths and the 8K cap are ours (the paper's
# horizon is not among what we could read): a lognormal tail, the horizon at half the cap.
DUET_WORKLOAD = """  prompt_tokens: {kind: lognormal, median_tokens: 150, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 2000, sigma: 0.9}
  groups: {within_group_correlation: 0.5}"""
DUET_BATCH = "prompts_per_step: 128, samples_per_prompt: 8, max_response_tokens: 8192"
DUET_ABORT = "{kind: early_abort, abort_horizon_tokens: 4096, grace_window_tokens: 256}"


def test_early_abort_speeds_up_grpo_by_cutting_marker_less_tails():
    """DUET (arXiv 2605.08441): 1.62x wall-clock over full-budget GRPO on Qwen3-1.7B (MATH), its abort rule "the
    wall-clock lever". rlsim, with the horizon at half an 8K cap and DUET's keep probability 0.05: 1.37x. The
    aborted 18 % of responses stop at 4,352 tokens and leave the loss, so both generation (the tail) and training
    (fewer, shorter sequences) shrink. The rest of DUET's figure is its per-prompt allocation (which rlsim runs as a
    per-prompt budget, workload.samples_per_prompt) and its trimming of answers after their marker, not modelled."""
    grpo = paper_run("Qwen3-1.7B", 1, 1, DUET_BATCH, DUET_WORKLOAD, "", 4, 0)
    duet = paper_run("Qwen3-1.7B", 1, 1, DUET_BATCH, DUET_WORKLOAD, DUET_ABORT, 4, 0)
    speedup = measured_seconds_per_step(grpo, 0) / measured_seconds_per_step(duet, 0)
    assert 1.25 <= speedup <= 1.8
    aborted = [r for r in duet.sequences if r.dropped_by == "early_abort"]
    trained = [r for r in duet.sequences if r.step_trained >= 0]
    # Every aborted response stopped at the horizon plus the grace window; about a fifth of them were aborted.
    assert aborted and all(r.response_tokens == 4096 + 256 and r.truncated for r in aborted)
    assert 0.12 <= len(aborted) / (4 * 128 * 8) <= 0.3
    # The kept marker-less ones (5 %) ran past it to their end.
    assert any(r.response_tokens > 4352 for r in trained)
    assert sum(r.response_tokens > 4352 for r in trained) < 0.2 * len(aborted)


# ------------------------------------------------------------------------------------------------- ARRoL

# Qwen3-1.7B (one of ARRoL's Qwen-3 and LLaMA-3.2 1B-8B models) on one 8-GPU node; lengths, cap and success rates are
# ours (the paper's setup beyond its abstract was not available): a lognormal tail, prompts right 30 % of the time on
# average, Beta-distributed across prompts.
ARROL_WORKLOAD = """  prompt_tokens: {kind: lognormal, median_tokens: 150, sigma: 0.5}
  response_tokens: {kind: lognormal, median_tokens: 2000, sigma: 0.9}
  groups: {within_group_correlation: 0.5}
  success_rate: {mean: 0.3, concentration: 2}
  informative: {kind: success_rate}"""
ARROL_STEPS = 3


def arrol_batch(samples: int) -> str:
    return f"prompts_per_step: 128, samples_per_prompt: {samples}, max_response_tokens: 8192"


def arrol_run(accuracy: float) -> EventLog:
    pruning = ("{kind: online_pruning, rollouts_per_prompt: 16, prune_at_tokens: 1024, "
               f"quality_head_accuracy: {accuracy}}}")
    return paper_run("Qwen3-1.7B", 1, 1, arrol_batch(8), ARROL_WORKLOAD, pruning, ARROL_STEPS, 0)


def mixed_share(samples: int, mean: float = 0.3, concentration: float = 2.0) -> float:
    """The chance a group of `samples` has right and wrong answers both, a prompt's success rate p ~ Beta: 1 − E[pⁿ]
    − E[(1 − p)ⁿ], with E[pⁿ] = Π (a + k)/(a + b + k) over k < n."""
    a, b = mean * concentration, (1 - mean) * concentration

    def moment(x: float, y: float) -> float:
        product = 1.0
        for k in range(samples):
            product *= (x + k) / (x + y + k)
        return product

    return 1 - moment(a, b) - moment(b, a)


def test_choose_pruned_steers_the_survivors_toward_the_target_share():
    from rlsim.sim.long_tail.online_pruning import choose_pruned

    # Two known successes, six generating (predicted: 4 successes, 2 failures); prune four toward half.
    pruned = choose_pruned([True, True], [True, False, True, True, False, True], 4, 0.5)
    assert pruned == [5, 3, 2, 0]  # predicted successes, latest first, until the survivors' share is half (2 of 4)
    # A group predicted all wrong keeps its successes: it prunes predicted failures, the latest first.
    assert choose_pruned([], [False, True, False, False], 2, 0.5) == [3, 2]
    # Nothing of the wanted kind left: the other kind goes; never more than are generating.
    assert choose_pruned([False] * 6, [True, True], 5, 0.5) == [1, 0]


def test_online_pruning_speeds_up_grpo_as_arrol_reports():
    """ARRoL (arXiv 2603.24840): up to 1.7x faster training than GRPO on Qwen-3 and LLaMA-3.2 (1B-8B). rlsim, with 16
    rollouts a prompt pruned to 8 at 1,024 tokens, against GRPO training all 16: ~1.45x. The pruned rollouts stop at
    the pruning point (only those still generating there can be pruned, the longer half here) and leave the
    log-probability passes and the update. The paper's other lever, a quality head that learns which partial
    rollouts fail, decides which are pruned, not how many, so it moves the speed little here: rlsim's correctness does
    not depend on length, where a real failing rollout often runs long."""
    grpo = paper_run("Qwen3-1.7B", 1, 1, arrol_batch(16), ARROL_WORKLOAD, "", ARROL_STEPS, 0)
    arrol = arrol_run(0.8)
    speedup = measured_seconds_per_step(grpo, 0) / measured_seconds_per_step(arrol, 0)
    assert 1.3 <= speedup <= 1.7
    pruned = [r for r in arrol.sequences if r.dropped_by == "online_pruning"]
    trained = [r for r in arrol.sequences if r.step_trained >= 0]
    # Every pruned rollout stopped at the pruning point; each group trains at least its 8 survivors.
    assert pruned and all(r.response_tokens == 1024 and r.truncated for r in pruned)
    assert len(pruned) + len(trained) == ARROL_STEPS * 128 * 16
    assert all(count >= 8 for count in Counter(r.group for r in trained).values())
    assert sample_use(arrol)["never_trained"]["by_policy"] == {"online_pruning": len(pruned)}


def test_a_better_quality_head_trains_more_groups_with_a_useful_gradient():
    """ARRoL steers the survivors toward balanced successes, so more trained groups have rewards that differ (a
    non-zero GRPO advantage). An oracle head keeps the minority answer of every mixed group: its share of useful groups
    is 16 rollouts' (the closed form over the prompts' Beta success rates, within three standard errors of 384
    groups), above the 8 a group trains without pruning; a coin-flip head prunes blind and stays near 8's."""
    shares = {accuracy: sample_use(arrol_run(accuracy))["useful_gradient"]["group_share"] for accuracy in (0.5, 1.0)}
    groups = ARROL_STEPS * 128
    for accuracy, samples in ((1.0, 16), (0.5, 8)):
        expected = mixed_share(samples)
        assert abs(shares[accuracy] - expected) <= 3 * (expected * (1 - expected) / groups) ** 0.5
    assert shares[1.0] > shares[0.5]


# ------------------------------------------------------------------------------------------------- checks


ARROL_TEST = "{kind: online_pruning, rollouts_per_prompt: 8, prune_at_tokens: 64, quality_head_accuracy: 0.8}"
SUCCESS = "success_rate: {mean: 0.5, concentration: 2}"


@pytest.mark.parametrize(("long_tail", "extra", "path"), [
    ("{kind: tail_batching, eta: 1.0}", {}, "schedule.long_tail.eta"),
    ("{kind: tail_batching, eta: 1.25}", {"dynamic_sampling": True}, "algorithm.dynamic_sampling"),
    ("{kind: segment_rollout, segments: 1}", {}, "schedule.long_tail.segments"),
    ("{kind: segment_rollout, segments: 4}", {"schedule": "async", "mode": "disaggregated", "rollout_gpus": 4,
                                              "training_gpus": 4}, "schedule.long_tail"),
    ("{kind: segment_rollout, segments: 4}", {"partial": "april", "over_provision": 2.0},
     "schedule.partial_rollout.mode"),
    ("{kind: tail_bathing, eta: 1.25}", {}, "schedule.long_tail"),
    ("{kind: early_abort, abort_horizon_tokens: 2000, grace_window_tokens: 48}", {},
     "schedule.long_tail.abort_horizon_tokens"),
    ("{kind: early_abort, abort_horizon_tokens: 500, abort_keep_probability: 1.5}", {},
     "schedule.long_tail.abort_keep_probability"),
    (ARROL_TEST, {"samples": 4}, "workload.success_rate"),
    (ARROL_TEST.replace("rollouts_per_prompt: 8", "rollouts_per_prompt: 4"), {"samples": 4, "workload": SUCCESS},
     "schedule.long_tail.rollouts_per_prompt"),
    (ARROL_TEST.replace("prune_at_tokens: 64", "prune_at_tokens: 2048"), {"samples": 4, "workload": SUCCESS},
     "schedule.long_tail.prune_at_tokens"),
    (ARROL_TEST.replace("quality_head_accuracy: 0.8", "quality_head_accuracy: 0.3"), {"samples": 4, "workload": SUCCESS},
     "schedule.long_tail.quality_head_accuracy"),
    (ARROL_TEST, {"samples": 4, "workload": SUCCESS, "dynamic_sampling": True}, "algorithm.dynamic_sampling"),
])
def test_a_bad_remedy_is_refused_at_its_field(long_tail, extra, path):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario_yaml(long_tail=long_tail, **extra))
    assert path in [p.path for p in caught.value.problems]
