"""All data-parallel ranks' micro-batches priced at once over numpy arrays and added up as a ranks × steps table: FSDP's
lock step (`Trainer._lock_step_micro_batches`, `TrainingCosts.micro_steps`) and single-stage forward passes
(`TrainingCosts.forward_passes`). Every figure must equal, to the bit, what pricing each micro-batch on its own and
adding step by step gives."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
import simpy

from rlsim.config.schema import TrainingPlacement
from rlsim.costs.training import TrainingCosts, micro_batch_shapes
from rlsim.costs.training_layers import PRICE_AHEAD_MIN_COUNTS, causal_pairs
from rlsim.costs.training_time import TRAINING_TIME_FIELDS, TrainingTime
from rlsim.sim.recorder import Recorder
from rlsim.sim.trainer import LABEL_ORDER, Trainer, TrainingGroup
from tests.test_training_costs import costs_on_h100s

LAYOUTS = {
    "FSDP": ("Qwen2.5-7B", TrainingPlacement(gpus=8, dp=8, backend="fsdp", zero_stage=3)),
    "FSDP, tp 2, selective recompute, offloaded optimizer": (
        "Qwen2.5-14B", TrainingPlacement(gpus=8, tp=2, dp=4, backend="fsdp", activation_recompute="selective",
                                         offload_optimizer=True)),
    "FSDP, cp 2": ("Qwen2.5-7B", TrainingPlacement(gpus=8, cp=2, dp=4, backend="fsdp", zero_stage=2)),
    "FSDP MoE, LoRA": ("Qwen3-30B-A3B", TrainingPlacement(gpus=8, dp=8, backend="fsdp", lora_rank=16)),
}


def textbook_lock_step(costs: TrainingCosts, per_rank: list[list[list[int]]]) -> list[dict[str, float]]:
    """Micro-step by micro-step, each micro-batch priced on its own: what the table must reproduce exactly."""
    optimizer = costs.optimizer_step(0)
    totals = [dict.fromkeys(LABEL_ORDER, 0.0) for _ in per_rank]
    for i in range(max(len(mbs) for mbs in per_rank)):
        micro = [costs.micro_step(mbs[i]) if i < len(mbs) else TrainingTime() for mbs in per_rank]
        slowest = max(t.total for t in micro)
        for rank, t in enumerate(micro):
            for label, seconds in t.labels().items():
                totals[rank][label] += seconds
            totals[rank]["barrier"] += slowest - t.total
    for rank in range(len(per_rank)):
        for label, seconds in optimizer.labels().items():
            totals[rank][label] += seconds
    return totals


def _per_rank(seed: int, ranks: int, most: int) -> list[list[list[int]]]:
    """Ranks of packed micro-batches of assorted lengths; some ranks have fewer micro-batches, one may have none."""
    rng = random.Random(seed)
    return [[[rng.randint(1, 20_000) for _ in range(rng.randint(1, 7))] for _ in range(rng.randint(0, most))]
            for _ in range(ranks)] + [[[rng.randint(1, 9000)] for _ in range(most)]]


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("most", [3, 40])  # few micro-batches (priced one by one) and many (over numpy arrays)
def test_lock_step_seconds_equal_the_step_by_step_sums(name, most):
    model, layout = LAYOUTS[name]
    per_rank = _per_rank(len(name) + most, layout.dp, most)
    trainer = Trainer(simpy.Environment(), Recorder(layout.gpus), TrainingGroup(0, costs_on_h100s(model, layout).layout),
                      "none")
    got = trainer._lock_step_micro_batches(costs_on_h100s(model, layout), per_rank)
    expected = textbook_lock_step(costs_on_h100s(model, layout), per_rank)
    assert got == expected
    assert [list(labels) for labels in got] == [list(labels) for labels in expected]  # same order: same wall sum


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_micro_steps_over_arrays_equal_each_micro_step(name):
    model, layout = LAYOUTS[name]
    micro_batches = [mb for mbs in _per_rank(len(name), 4, 30) for mb in mbs]
    assert len(micro_batches) >= PRICE_AHEAD_MIN_COUNTS
    steps = costs_on_h100s(model, layout).micro_steps(micro_batches)
    scalar = costs_on_h100s(model, layout)
    for i, lengths in enumerate(micro_batches):
        expected = scalar.micro_step(lengths)
        assert TrainingTime(*(float(getattr(steps, f)[i]) for f in TRAINING_TIME_FIELDS)) == expected, lengths


def test_micro_batch_shapes_are_their_tokens_and_causal_pairs_to_the_bit():
    rng = random.Random(5)
    micro_batches = [[rng.choice([1, 2, 3, 10**5, rng.randint(1, 10**6)]) for _ in range(rng.randint(1, 60))]
                     for _ in range(300)]
    totals, pairs = micro_batch_shapes(micro_batches)
    assert totals.tolist() == [float(sum(mb)) for mb in micro_batches]
    assert pairs.tolist() == [causal_pairs(mb) for mb in micro_batches]
    assert pairs.dtype == np.float64


def test_a_lock_step_rank_needs_one_pipeline_stage():
    layout = TrainingPlacement(gpus=16, pp=2, dp=8, backend="fsdp", zero_stage=3)
    costs = costs_on_h100s("Qwen2.5-7B", layout)
    with pytest.raises(ValueError, match="one pipeline stage"):
        costs.micro_steps([[100]] * PRICE_AHEAD_MIN_COUNTS)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("head", ["lm", "value"])
@pytest.mark.parametrize("most", [3, 40])
def test_forward_passes_of_all_ranks_equal_each_ranks_forward_pass(name, head, most):
    model, layout = LAYOUTS[name]
    per_rank = _per_rank(2 * len(name) + most, layout.dp, most)
    passes = replace(costs_on_h100s(model, layout), head=head).forward_passes(per_rank)
    scalar = replace(costs_on_h100s(model, layout), head=head)
    object.__setattr__(scalar, "price_ahead", lambda *args, **kwargs: None)  # every micro-batch priced on its own
    assert passes == [scalar.forward_pass(mbs) if mbs else None for mbs in per_rank]


def test_a_trainer_reuses_a_forward_pass_only_for_the_same_batch_and_cost_model():
    """The reference pass of a policy whose reference shares its cost model runs the old-log-prob pass's batch again."""
    model, layout = LAYOUTS["FSDP"]
    costs = costs_on_h100s(model, layout)
    value_head = replace(costs, head="value")
    rng = random.Random(9)
    batch = [rng.randint(1, 20_000) for _ in range(200)]
    other = [*batch[:-1], batch[-1] + 5_000]

    def run(trainer: Trainer, pass_costs: TrainingCosts, lengths: list[int]) -> float:
        """Run one forward pass on `trainer`; when it ends."""
        trainer.env.process(trainer.forward_pass("ref", pass_costs, lengths))
        trainer.env.run()
        return trainer.env.now

    def fresh(start: float) -> Trainer:
        return Trainer(simpy.Environment(initial_time=start), Recorder(layout.gpus), TrainingGroup(0, costs.layout),
                       "sorted_greedy")

    passes = [(costs, batch), (costs, batch), (costs, other), (value_head, batch)]
    shared = fresh(0.0)
    ends = [run(shared, *item) for item in passes]
    starts = [0.0, *ends[:-1]]
    assert ends == [run(fresh(start), *item) for start, item in zip(starts, passes, strict=True)]  # as if on its own
    took = [end - start for start, end in zip(starts, ends, strict=True)]
    assert took[1] == pytest.approx(took[0]) and took[2] != pytest.approx(took[0]) and took[3] != pytest.approx(took[0])
