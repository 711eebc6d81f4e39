"""The simulator's parts that need no rollout engine: DP balancing, micro-batch packing, recorder, reward pool."""
from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.config.schema import TrainingPlacement
from rlsim.config.workload import RuleReward, SandboxReward
from rlsim.costs.training import GroupCollectives, TrainingCosts, pipeline_pad_to
from rlsim.metrics import gpu_label_seconds
from rlsim.sim.dp_balance import DP_BALANCERS, pack_micro_batches, work
from rlsim.sim.recorder import Recorder
from rlsim.sim.reward import RewardPool
from rlsim.sim.trainer import Trainer, TrainingGroup
from tests.test_training_costs import MODELS, RATES, free

LENGTHS = st.lists(st.integers(min_value=1, max_value=32_000), min_size=1, max_size=200)


@settings(max_examples=100, deadline=None)
@given(LENGTHS, st.integers(min_value=1, max_value=16), st.sampled_from(sorted(DP_BALANCERS)))
def test_every_sequence_goes_to_exactly_one_rank(lengths, ranks, policy):
    assignment = DP_BALANCERS[policy](lengths, ranks)
    assert len(assignment) == ranks
    assert sorted(i for rank in assignment for i in rank) == list(range(len(lengths)))


def imbalance(lengths, ranks, policy) -> float:
    loads = [sum(work(lengths[i]) for i in rank) for rank in DP_BALANCERS[policy](lengths, ranks)]
    return max(loads) / (sum(loads) / ranks)


def test_balancing_policies_beat_dealing_in_order_on_skewed_lengths():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in np.clip(rng.lognormal(7.5, 1.0, 512), 1, 16_000)]
    plain = imbalance(lengths, 16, "none")
    assert imbalance(lengths, 16, "sorted_greedy") < plain
    assert imbalance(lengths, 16, "karmarkar_karp") < plain
    assert imbalance(lengths, 16, "karmarkar_karp") < 1.05


def test_dp_imbalance_grows_with_length_variance():
    rng = np.random.default_rng(1)
    narrow = [int(x) for x in np.clip(rng.lognormal(7.5, 0.2, 256), 1, 32_000)]
    wide = [int(x) for x in np.clip(rng.lognormal(7.5, 1.2, 256), 1, 32_000)]
    assert imbalance(wide, 32, "none") > imbalance(narrow, 32, "none")


@settings(max_examples=100, deadline=None)
@given(LENGTHS, st.integers(min_value=1, max_value=40_000))
def test_micro_batches_hold_every_sequence_within_capacity(lengths, capacity):
    bins = pack_micro_batches(lengths, capacity)
    assert sorted(x for b in bins for x in b) == sorted(lengths)
    assert all(sum(b) <= capacity or len(b) == 1 for b in bins)
    assert bins == first_fit_decreasing(lengths, capacity)


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """The textbook first fit, scanning every bin: what pack_micro_batches must reproduce exactly."""
    bins: list[list[int]] = []
    for length in sorted(lengths, reverse=True):
        fit = next((b for b in bins if sum(b) + length <= capacity), None)
        if fit is None:
            bins.append([length])
        else:
            fit.append(length)
    return bins


def test_recorder_labels_every_gpu_second_once():
    rec = Recorder(gpus=4)
    rec.busy(0, 2, 0.0, 3.0, "decode", "gen")
    rec.busy(2, 2, 0.0, 1.0, "decode", "gen")
    rec.context(0, 4, 0.0, 5.0, "tail", "gen")
    rec.context(0, 4, 5.0, 8.0, "starved", "reward")
    rec.busy(0, 4, 8.0, 9.0, "train_forward", "update_actor")
    log = rec.freeze(wall_s=10.0, events=0)
    per_gpu = gpu_label_seconds(log)
    for seconds in per_gpu:
        assert sum(seconds.values()) == pytest.approx(10.0)
    assert per_gpu[0] == pytest.approx({"decode": 3.0, "tail": 2.0, "starved": 3.0, "train_forward": 1.0,
                                        "unassigned": 1.0})
    assert per_gpu[3] == pytest.approx({"decode": 1.0, "tail": 4.0, "starved": 3.0, "train_forward": 1.0,
                                        "unassigned": 1.0})
    # Idle pieces of neighbouring GPUs with the same content are merged into one span.
    tails = [s for s in log.spans if s.label == "tail"]
    assert {(s.first_gpu, s.gpu_count) for s in tails} == {(0, 2), (2, 2)}


def test_rule_reward_is_samples_over_workers():
    env = simpy.Environment()
    pool = RewardPool(env, RuleReward(kind="rule", cpu_seconds_per_sample=0.5, workers=4), np.random.default_rng(0))
    env.process(pool.score_batch(10))
    env.run()
    assert env.now == pytest.approx(0.5 * 3)  # 10 samples on 4 workers: 3 rounds


def test_sandbox_concurrency_limits_throughput():
    times = []
    for concurrency in (4, 64):
        env = simpy.Environment()
        reward = SandboxReward(kind="sandbox", median_latency_s=2.0, latency_sigma=0.5, concurrency=concurrency)
        pool = RewardPool(env, reward, np.random.default_rng(3))
        env.process(pool.score_batch(256))
        env.run()
        times.append(env.now)
    assert times[0] > 8 * times[1]


def forward_seconds(lengths: list[int], **layout_changes) -> tuple[float, TrainingCosts]:
    """Wall seconds of one log-prob pass over `lengths` on 2 data-parallel ranks of a 7B model, and its costs."""
    layout = TrainingPlacement(gpus=2, dp=2, backend="fsdp", zero_stage=1, activation_recompute="none",
                               micro_batch_tokens=8192, **layout_changes)
    env = simpy.Environment()
    costs = TrainingCosts(MODELS.spec("Qwen2.5-7B"), RATES, layout, GroupCollectives(dp=free))
    trainer = Trainer(env, Recorder(2), TrainingGroup(0, layout), "none")
    env.process(trainer.forward_pass("old_log_prob", costs, lengths))
    env.run()
    return env.now, costs


def test_micro_batches_of_a_forward_pass_pad_to_the_batchs_longest_without_packing_and_take_their_own_budget():
    lengths = [4000, 1000, 500, 500, 300, 200, 100, 100]
    packed, _ = forward_seconds(lengths)
    padded, costs = forward_seconds(lengths, sequence_packing=False)
    # Two sequences of 4000 tokens fit a micro-batch of 8192; each rank holds four sequences: two micro-batches.
    assert padded == pytest.approx(costs.forward_pass([[4000, 4000], [4000, 4000]]).seconds)
    assert padded > 2 * packed
    # Forward-only passes pack to their own budget.
    wide, costs = forward_seconds(lengths, logprob_micro_batch_tokens=16384)
    assert wide == pytest.approx(costs.forward_pass([[4000, 500, 300, 100]]).seconds)
    # A batch of equal lengths has nothing to pad: packing changes nothing but how sequences share micro-batches.
    equal, _ = forward_seconds([2048] * 8)
    assert forward_seconds([2048] * 8, sequence_packing=False)[0] == pytest.approx(equal)


def test_a_pipeline_that_pads_micro_batches_runs_each_at_the_ranks_longest_and_skips_attention_on_the_padding():
    """NeMo-RL pads every packed micro-batch of a rank to the rank's longest when pp > 1 (pad_full_seq_to)."""
    lengths = [4000, 3000, 1000, 500]  # one rank: packs into [4000], [3000, 1000], [500] within 4,096 tokens
    seconds = {}
    for pads in (False, True):
        layout = TrainingPlacement(gpus=2, pp=2, dp=1, backend="megatron", zero_stage=1, activation_recompute="none",
                                   micro_batch_tokens=4096, pp_pads_micro_batches=pads)
        costs = TrainingCosts(MODELS.spec("Qwen2.5-7B"), RATES, layout, GroupCollectives(pp=free))
        env = simpy.Environment()
        env.process(Trainer(env, Recorder(2), TrainingGroup(0, layout), "none").forward_pass("ref", costs, lengths))
        env.run()
        seconds[pads] = env.now
    packed = [[4000], [3000, 1000], [500]]
    assert seconds[False] == pytest.approx(costs.forward_pass(packed).seconds)
    assert seconds[True] == pytest.approx(costs.forward_pass(packed, pad_to=4000).seconds)
    assert seconds[True] > 1.2 * seconds[False]  # GEMMs over 12,000 tokens instead of 8,500
    # Padding runs through the GEMMs but not attention: 500 tokens padded to 4,000 attend over 500 only.
    padded, real = costs.layer_forward("dense", [500], pad_to=4000), costs.layer_forward("dense", [4000])
    assert padded.gemm == pytest.approx(real.gemm) and padded.attention < real.attention / 10
    # Without pipeline parallelism every micro-batch runs at its own length, whatever the setting.
    flat = TrainingPlacement(gpus=1, dp=1, backend="megatron", zero_stage=1, micro_batch_tokens=4096,
                             pp_pads_micro_batches=True)
    assert pipeline_pad_to(flat, packed) == 0 and pipeline_pad_to(layout, packed) == 4000


def test_a_context_parallel_group_packs_the_per_gpu_budget_on_each_of_its_gpus():
    """verl scales ppo_max_token_len_per_gpu by the context-parallel size: 4,096 per GPU over CP2 packs 8,192."""
    layout = TrainingPlacement(gpus=2, cp=2, dp=1, backend="fsdp", zero_stage=1, activation_recompute="none",
                               micro_batch_tokens=4096)
    costs = TrainingCosts(MODELS.spec("Qwen2.5-7B"), RATES, layout, GroupCollectives(dp=free, cp=free))
    env = simpy.Environment()
    env.process(Trainer(env, Recorder(2), TrainingGroup(0, layout), "none").forward_pass("ref", costs, [3000] * 4))
    env.run()
    assert env.now == pytest.approx(costs.forward_pass([[3000, 3000], [3000, 3000]]).seconds)
