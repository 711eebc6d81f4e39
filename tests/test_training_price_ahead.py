"""A pass's micro-batches are priced all at once with numpy (`TrainingCosts.price_ahead`): every
micro-batch must get, to the bit, what the scalar path gives it, whatever the layout."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from rlsim.config.schema import TrainingPlacement
from rlsim.costs.memo import Memo
from rlsim.costs.training import TrainingCosts
from rlsim.costs.training_layers import PRICE_AHEAD_MIN_COUNTS, causal_pairs
from tests.test_training_costs import costs_on_h100s

LAYOUTS = {
    "FSDP": ("Qwen2.5-7B", TrainingPlacement(gpus=8, dp=8, backend="fsdp", zero_stage=3)),
    "FSDP, tp 2, selective recompute": ("Qwen2.5-14B", TrainingPlacement(gpus=8, tp=2, dp=4, backend="fsdp",
                                                                         activation_recompute="selective")),
    "Megatron, tp 4, pp 2, cp 3": ("Qwen2.5-14B", TrainingPlacement(gpus=48, tp=4, pp=2, cp=3, dp=2, backend="megatron",
                                                                     zero_stage=1, logprob_kernel="fp32_vocab_parallel")),
    "Megatron MoE, ep 4": ("Qwen3-30B-A3B", TrainingPlacement(gpus=16, tp=2, ep=4, dp=8, backend="megatron",
                                                              zero_stage=1, activation_recompute="none")),
    "FP8": ("Qwen2.5-7B", TrainingPlacement(gpus=8, tp=2, dp=4, backend="megatron", zero_stage=1, precision="fp8")),
    "LoRA": ("Qwen3-30B-A3B", TrainingPlacement(gpus=8, dp=8, backend="fsdp", lora_rank=16)),
}


def _micro_batches(seed: int) -> list[list[int]]:
    """Packed micro-batches of assorted lengths: many distinct token counts, some repeated, a few below one tile."""
    rng = random.Random(seed)
    batches = [[rng.randint(1, 9000) for _ in range(rng.randint(1, 6))] for _ in range(3 * PRICE_AHEAD_MIN_COUNTS)]
    return [*batches, *batches[:5], [7], [100, 20]]


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("head", ["lm", "value"])
@pytest.mark.parametrize("backward", [True, False])
def test_micro_batches_priced_ahead_equal_the_scalar_prices(name, head, backward):
    model, layout = LAYOUTS[name]
    scalar = replace(costs_on_h100s(model, layout), head=head)
    ahead = replace(scalar)
    micro_batches = _micro_batches(len(name))
    ahead.price_ahead(micro_batches, backward=backward)
    # ZeRO-2/3 reduce gradients after every micro-batch, ZeRO-0/1 before the last; None: a forward-only pass.
    reduce_gradients = (scalar.layout.zero_stage >= 2) if backward else None
    assert len(ahead._micro_batch_memo) >= 2 * PRICE_AHEAD_MIN_COUNTS  # priced by numpy, not one by one
    for lengths in micro_batches:
        assert (sum(lengths), 0, causal_pairs(lengths), reduce_gradients) in ahead._micro_batch_memo
        expected = scalar._micro_batch_ops(lengths, 0, reduce_gradients)
        assert ahead._micro_batch_ops(lengths, 0, reduce_gradients) == expected, lengths
    for lengths in micro_batches[:3]:  # what was not priced ahead is priced as before
        other = not reduce_gradients if backward else True
        assert ahead._micro_batch_ops(lengths, 0, other) == scalar._micro_batch_ops(lengths, 0, other)


def test_padded_micro_batches_priced_ahead_equal_the_scalar_prices():
    model, layout = LAYOUTS["Megatron, tp 4, pp 2, cp 3"]
    costs = costs_on_h100s(model, layout)
    micro_batches = _micro_batches(3)
    pad_to = max(sum(mb) for mb in micro_batches)
    fresh: TrainingCosts = replace(costs)
    # The scalar prices, micro-batch by micro-batch, before anything is priced ahead.
    expected = [fresh._micro_batch_ops(mb, pad_to, True) for mb in micro_batches]
    ahead = replace(costs)
    ahead.price_ahead(micro_batches, pad_to, backward=True)
    assert [ahead._micro_batch_ops(mb, pad_to, True) for mb in micro_batches] == expected


def test_a_memo_priced_ahead_keeps_to_its_limit():
    memo = Memo(lambda key: key * 2, limit=4)
    memo.remember((k, 2 * k) for k in range(3))
    assert memo == {0: 0, 1: 2, 2: 4}
    memo.remember((k, 2 * k) for k in range(3, 5))  # would hold 5: starts afresh
    assert memo == {3: 6, 4: 8}
    assert memo[1] == 2 and len(memo) == 3
