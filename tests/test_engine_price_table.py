"""An engine prices its layers over blocks of token counts with numpy (`EngineCosts._price_layer_block`): every count
must get, to the bit, what the scalar path gives it, on every kind of engine the kernels are built for."""
from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import numpy as np
import pytest

from rlsim.costs.compute import GPURates
from rlsim.costs.iteration_work import prefill_counts, work_of
from rlsim.costs.memo import BlockMemo
from rlsim.costs.rollout import (
    CONTEXT_FREE_RADIX,
    TOKEN_BLOCK,
    EngineCosts,
    EngineOverheads,
    PrefillChunk,
    context_free_cache_index,
    context_free_key,
)
from rlsim.costs.speculative import Speculation
from rlsim.pricing.precision import engine_precision
from tests.interpreted_engine import needs_interpreted_engine
from tests.test_rollout_costs import A100, H100, HARDWARE, engine

MI300X = HARDWARE.gpu("mi300x")


def _engines() -> dict[str, EngineCosts]:
    fp8 = engine_precision(H100, "fp8")
    quantized = replace(engine("Qwen3-8B"), weight_dtype_bytes=fp8.weight_bytes, quantized_rates=fp8.quantized_rates)
    dense = engine("Qwen2.5-14B")
    return {
        "dense": dense,
        "dense, tp 2, A100": engine("Qwen2.5-7B", gpu=A100, tp=2),
        "dense, calibrated MI300X": engine("Llama-3.1-8B", gpu=MI300X),
        "dense, no SM count": replace(dense, rates=replace(dense.rates, sm_count=None)),
        "MoE, tp 4, ep 2, imbalanced": replace(engine("Qwen3-30B-A3B", tp=4, ep=2), expert_load_imbalance=1.3),
        "MoE, one GPU": engine("Qwen3-30B-A3B"),
        "W8A8": quantized,
        "weight-only FP8": replace(engine("Qwen2.5-7B", gpu=A100), weight_dtype_bytes=1.0),
        "LoRA": replace(engine("Qwen2.5-1.5B"), lora_rank=8),
        "eager vLLM": engine("Qwen3-8B", overheads=EngineOverheads(cuda_graphs=False)),
        "HF generate()": engine("Qwen2.5-1.5B", overheads=EngineOverheads(engine="hf")),
    }


ENGINES = _engines()


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_block_of_token_counts_prices_each_count_as_the_scalar_path_does(name):
    costs = ENGINES[name]
    # The first two blocks (counts below one GEMM tile take the scalar tile search), one at the usual
    # max_num_batched_tokens, and one far beyond it.
    for first in (0, TOKEN_BLOCK, 8192 - TOKEN_BLOCK, 40 * TOKEN_BLOCK):
        counts = range(first, first + TOKEN_BLOCK)
        block = costs._price_layer_block(counts)
        table = [block[row] for row in range(len(block))]
        scalar = [costs._price_latent_layers((count, 0)) for count in counts]
        different = [(count, a, b) for count, a, b in zip(counts, table, scalar, strict=True) if a != b]
        assert not different, f"{name}: {len(different)} counts differ, first {different[0]}"
        assert all(type(seconds) is float for seconds, after_head, _ in table for seconds in (seconds, *after_head))


@pytest.mark.parametrize("name", ["dense", "MoE, tp 4, ep 2, imbalanced"])
def test_an_iteration_is_priced_the_same_whichever_iteration_fills_the_block(name):
    """The table is filled by whichever count a run asks for first: the price of an iteration does not depend on it."""
    chunks = (PrefillChunk(700, 300, True), PrefillChunk(129, 0, False))
    first = replace(ENGINES[name])
    seconds = first.iteration_seconds(3, 4000.0, chunks)
    other = replace(ENGINES[name])
    other.iteration_seconds(1)  # fills another block first
    assert other.iteration_seconds(3, 4000.0, chunks) == seconds
    assert type(seconds) is float


def test_an_mla_engine_prices_its_latent_rows_by_the_scalar_path():
    """DeepSeek's kv_b_proj expands the cached latents of a prefill too: its layers depend on more than the tokens."""
    costs = engine("DeepSeek-V3", tp=8, ep=8, gpu=H100)
    fresh = costs.iteration_seconds(prefill=(PrefillChunk(512, 0, True),))
    cached = costs.iteration_seconds(prefill=(PrefillChunk(512, 4096, True),))
    assert cached > fresh
    assert not costs._layers_memo and len(costs._latent_layers_memo) == 2


def test_a_block_memo_prices_the_block_around_a_missing_key_once():
    asked: list[range] = []

    def squares(keys: range) -> list[int]:
        asked.append(keys)
        return [k * k for k in keys]

    memo = BlockMemo(squares, 4)
    assert memo[6] == 36 and memo[4] == 16 and memo[7] == 49
    assert asked == [range(4, 8)]
    assert memo[1] == 1 and asked[-1] == range(0, 4)
    with pytest.raises(KeyError):
        memo[-1]
    with pytest.raises(ValueError, match="at least one key"):
        BlockMemo(squares, 0)


@pytest.mark.parametrize("sm_count", [132, None])
def test_rates_price_gemms_over_arrays_as_the_scalar_function_does(sm_count):
    """Rows, columns or the inner dimension an array (a training GEMM's weight gradient runs over the tokens), with
    and without the traffic given: element by element the scalar prices."""
    rates = replace(GPURates.from_profile(H100), sm_count=sm_count)
    counts = np.array([0.0, 1.0, 3.5, 16.0, 17.0, 127.0, 128.0, 129.0, 1000.0, 8191.0, 12345.5, 1e6])
    nbytes = 2.0 * counts * 5120 + 1e7
    for m, n, k, traffic in ((counts, 13824.0, 5120.0, nbytes), (counts, 13824.0, 5120.0, None),
                             (5120.0, 13824.0, counts, None), (128.0, counts, 64.0, None)):
        many = rates.gemm_seconds(m, n, k, nbytes=traffic).tolist()
        scalar = [rates.gemm_seconds(*(float(x[i]) if isinstance(x, np.ndarray) else x for x in (m, n, k)),
                                     nbytes=None if traffic is None else float(traffic[i])) for i in range(len(counts))]
        assert many == scalar
    flops = 2.0 * counts * 5120 * 13824
    assert rates.kernel_seconds(flops, nbytes).tolist() == [rates.kernel_seconds(f, b) for f, b in
                                                             zip(flops.tolist(), nbytes.tolist(), strict=True)]


def _priced_part_by_part(costs: EngineCosts, decode_batch: int, decode_context: float,
                         chunks: tuple[PrefillChunk, ...]) -> float:
    """An iteration's price summed from its parts' memos in `EngineKernels.context_free_kernels`' order, then
    attention, the launch gaps and the CPU bounds: the float operations the remembered context-free part must keep."""
    kernels = costs._kernels
    work = work_of(decode_batch, chunks)
    if costs._latent:
        layers, after_head, layer_launches = costs._latent_layers_memo[work.tokens, kernels.latent_rows(work)]
    else:
        layers, after_head, layer_launches = costs._layers_memo[work.tokens]
    collectives, collective_launches = costs._collectives_memo[work.tokens]
    head, head_launches = costs._logits_memo[work.logit_rows]
    seconds = layers
    for part in (*head, *after_head):
        seconds += part
    gpu = seconds + collectives + kernels.attention_seconds(work, decode_context)
    launches = layer_launches + collective_launches + head_launches + kernels.attention_launches
    busy_until, then = costs.overheads.cpu_bounds(work.tokens, launches, work.decode + work.prefill_sequences)
    return max(gpu + launches * costs.overheads.kernel_gap_seconds, busy_until) + then


PRICED_ENGINES = {**ENGINES, "MLA, tp 8, ep 8": engine("DeepSeek-V3", tp=8, ep=8, gpu=H100),
                  "no overlap scheduling": engine("Qwen2.5-7B", overheads=EngineOverheads(overlap_scheduling=False))}


@pytest.mark.parametrize("name", list(PRICED_ENGINES))
def test_an_iteration_and_its_one_chunk_shortcut_are_priced_as_the_sum_of_their_parts(name):
    """The parts that do not depend on the context are remembered per (tokens, rows sampled, sequences, latent rows)
    already summed; the price is still, to the bit, the parts summed in their order; and one chunk priced without
    building it (`chunk_iteration_seconds`) is priced as the same chunk in a list."""
    costs = replace(PRICED_ENGINES[name])
    rng = np.random.default_rng(36)
    for _ in range(300):
        decode_batch = int(rng.integers(0, 300))
        context = float(decode_batch * rng.integers(0, 30_000))
        tokens, cached = int(rng.integers(1, 8192)), int(rng.integers(0, 60_000))
        logits = bool(rng.integers(0, 2))
        chunks = (PrefillChunk(tokens, cached, logits),)
        expected = _priced_part_by_part(costs, decode_batch, context, chunks)
        assert costs.iteration_seconds(decode_batch, context, chunks) == expected
        assert costs.chunk_iteration_seconds(decode_batch, context, tokens, cached, logits) == expected
        more = (*chunks, PrefillChunk(int(rng.integers(1, 900)), int(rng.integers(0, 900)), True))
        assert costs.iteration_seconds(decode_batch, context, more) == _priced_part_by_part(costs, decode_batch,
                                                                                            context, more)
        if decode_batch:
            assert costs.iteration_seconds(decode_batch, context) == _priced_part_by_part(costs, decode_batch,
                                                                                         context, ())


@pytest.mark.parametrize("name", list(PRICED_ENGINES))
def test_several_chunks_priced_by_their_counts_are_priced_as_the_chunks(name):
    """A prefill run sums an iteration's chunks as it plans them and prices the sums (`counted_iteration_seconds`):
    to the bit the chunks' own price, however many chunks, whatever their order."""
    costs = replace(PRICED_ENGINES[name])
    rng = np.random.default_rng(3636)
    for _ in range(200):
        decode_batch = int(rng.integers(0, 300))
        context = float(decode_batch * rng.integers(0, 30_000))
        chunks = [PrefillChunk(int(rng.integers(1, 8192)), int(rng.integers(0, 60_000)), bool(rng.integers(0, 2)))
                  for _ in range(int(rng.integers(1, 6)))]
        counts = prefill_counts(chunks)
        assert costs.counted_iteration_seconds(decode_batch, context, *counts) == costs.iteration_seconds(
            decode_batch, context, chunks) == costs.iteration_seconds(decode_batch, context, chunks[::-1])


def test_chunks_priced_by_their_counts_refuse_no_chunk_and_negative_counts():
    costs = ENGINES["dense"]
    for counts in ((0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (16, -1, 136, 1, 1), (16, 0, 136, 1, 0)):
        with pytest.raises(ValueError, match="counted_iteration_seconds needs"):
            costs.counted_iteration_seconds(4, 100.0, *counts)
    with pytest.raises(ValueError, match="counted_iteration_seconds needs"):
        costs.counted_iteration_seconds(-1, 100.0, 16, 0, 136, 1, 1)


def test_a_speculating_engine_prices_one_chunk_without_building_it_as_in_a_list():
    """An iteration with a prefill chunk is one forward pass even when the engine speculates (the mean speculative
    step prices decode-only iterations)."""
    dense = ENGINES["dense"]
    costs = replace(dense, speculation=Speculation(3, 0.7, replace(ENGINES["LoRA"], lora_rank=0)))
    for decode_batch, context, tokens, cached, logits in ((0, 0.0, 512, 0, True), (12, 30_000.0, 2048, 9000, False),
                                                          (200, 1e6, 1, 70_000, True)):
        chunk = PrefillChunk(tokens, cached, logits)
        assert (costs.chunk_iteration_seconds(decode_batch, context, tokens, cached, logits)
                == costs.iteration_seconds(decode_batch, context, [chunk])
                == dense.iteration_seconds(decode_batch, context, [chunk]))


def test_one_chunk_priced_without_building_it_refuses_what_the_general_path_refuses():
    costs = ENGINES["dense"]
    assert costs.chunk_iteration_seconds(0, 0.0, 0, 0, False) == 0.0 == costs.iteration_seconds()
    with pytest.raises(ValueError, match="prefill chunk sizes must be >= 0"):
        costs.chunk_iteration_seconds(4, 100.0, -1, 0, True)
    with pytest.raises(ValueError, match="decode_batch and decode_context must be >= 0"):
        costs.chunk_iteration_seconds(-1, 100.0, 16, 0, True)


def test_a_context_free_key_is_one_shape_and_prices_as_its_counts():
    """The context-free memo's keys (`context_free_key`): an int below the radix, a tuple at or past it or with MLA
    latent rows; distinct counts never share a key, and an int key prices exactly what its counts' tuple does."""
    radix = CONTEXT_FREE_RADIX
    counts = [(tokens, logits, sequences, latent) for tokens in (1, 8192, radix - 1, radix)
              for logits in (0, 1, radix - 1, radix) for sequences in (1, 129, radix - 1, radix) for latent in (0, 7)]
    keys = [context_free_key(*shape) for shape in counts]
    assert len(set(keys)) == len(counts)
    for shape, key in zip(counts, keys, strict=True):
        assert isinstance(key, int) == (max(shape[:3]) < radix and not shape[3])
    dense = ENGINES["dense"]
    for shape in [(8192, 128, 129, 0), (radix - 1, radix - 1, 1, 0), (1, 0, 1, 0)]:
        assert dense._price_context_free(context_free_key(*shape)) == dense._price_context_free(shape)


def _cache_shapes(seed: int) -> list[tuple[int, int, int, bool]]:
    """Random chunk iterations (decode batch, chunk tokens, cached tokens, logits), then pairs of shapes that share a
    slot of `ContextFreeCache` (a chunk beside a decode batch), each priced in turn, twice."""
    rng = np.random.default_rng(seed)
    shapes = [(int(rng.integers(0, 300)), int(rng.integers(1, 8192)), int(rng.integers(0, 60_000)),
               bool(rng.integers(0, 2))) for _ in range(1500)]
    slots: dict[int, tuple[int, int]] = {}
    for batch in range(300):
        for tokens in range(1, 8192, 61):
            index = context_free_cache_index(batch + tokens, batch, batch + 1)
            if index in slots and len(shapes) < 1580:
                shapes += [(*slots[index], 5000, False), (batch, tokens, 5000, False)] * 2
            slots.setdefault(index, (batch, tokens))
    assert len(shapes) == 1580
    return shapes


def _prices(costs: EngineCosts, shapes: list[tuple[int, int, int, bool]]) -> dict:
    return {shape: costs.chunk_iteration_seconds(shape[0], float(shape[0] * 900), *shape[1:]) for shape in shapes}


@pytest.mark.parametrize("name", ["dense", "MoE, tp 4, ep 2, imbalanced"])
def test_the_cache_before_the_memo_changes_no_price_and_copies_empty(name):
    """`ContextFreeCache`: iterations priced again in another order, by a cost model that has priced them and by one
    that has not, get the same prices to the bit; shapes that share a cache slot take it over in turn without mixing
    their values. The cache pickles and copies empty (librt's columns do not pickle; what it holds is the memo's)."""
    costs = replace(ENGINES[name])
    shapes = _cache_shapes(1127)
    first = _prices(costs, shapes)
    assert _prices(costs, shapes[::-1]) == first
    assert _prices(replace(ENGINES[name]), shapes[::-1]) == first
    cache = costs._context_free_cache  # noqa: SLF001 - the cache's own copies are the point
    assert max(cache.keys) >= 0
    for copied in (pickle.loads(pickle.dumps(cache)), copy.deepcopy(cache), copy.copy(cache)):
        assert type(copied) is type(cache) and set(copied.keys) == {-1}


@needs_interpreted_engine
def test_a_cost_model_pickles_and_copies_as_before_its_cache():
    """An interpreted cost model pickles and deep-copies (mypyc's frozen dataclasses never did: they unpickle by
    setting fields), its cache starting empty, and the copies price as it does."""
    costs = replace(ENGINES["dense"])
    shapes = _cache_shapes(2711)
    first = _prices(costs, shapes)
    for copied in (pickle.loads(pickle.dumps(costs)), copy.deepcopy(costs)):
        assert _prices(copied, shapes) == first
