"""What one rollout-engine iteration computes (`Work`, summed from its decodes and prefill chunks by `work_of`), and
the price of its attention when every decode asks one query (`SingleQueryAttention`): the two parts of an iteration's
price that depend on more than the counts the engine's context-free memo holds, so every prefill iteration priced asks
them. Scalar and typed, so that a wheel compiles them with the engine (`rlsim.compiled_engine`); the kernel model they
stand for, and the array-valued pricing, is `rlsim.costs.engine_kernels`'."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from librt.vecs import append, vec
from mypy_extensions import i64

if TYPE_CHECKING:
    from rlsim.costs.rollout import ChunkFields


class Work(NamedTuple):
    """What one iteration computes: decode rows plus prefill chunks, summed (`work_of` builds it). The counts derived
    from the others are fields, not properties: every iteration priced reads them several times."""

    decode: int  # decoding sequences, one new token each
    prefill: int  # new prompt tokens
    prefill_cached: int  # tokens of those prompts already cached, re-read by their attention
    prefill_pairs: float  # (query, key) pairs of the prefill attention, causal within each chunk
    prefill_logits: int  # chunks that end their prompt
    prefill_sequences: int  # sequences with a prefill chunk in the iteration
    # Tokens each decoding sequence runs through the model: 1, or a speculative verify step's drafted tokens + 1.
    decode_queries: int
    decode_rows: int  # decode × decode_queries
    tokens: int  # decode_rows + prefill
    logit_rows: int  # decode_rows + prefill_logits: rows through the output head and the sampler


def chunk_pairs(tokens: i64, cached_tokens: i64) -> i64:
    """(query, key) pairs of a prefill chunk's attention: each of its `tokens` new tokens sees the `cached_tokens`
    before the chunk and, causally, the chunk's own tokens up to itself."""
    return tokens * cached_tokens + tokens * (tokens + 1) // 2


def prefill_counts(prefill: Iterable[ChunkFields]) -> tuple[int, int, int, int, int]:
    """`Work`'s prefill counts of the chunks (each a `PrefillChunk` or a plain tuple of its fields): new tokens,
    cached tokens, (query, key) pairs, chunks ending their prompt, sequences. Integer sums, so the same values
    whatever the chunks' order."""
    new = cached = pairs = logits = sequences = 0
    for tokens, cached_tokens, chunk_logits in prefill:
        if tokens < 0 or cached_tokens < 0:
            raise ValueError(f"prefill chunk sizes must be >= 0, got {(tokens, cached_tokens, chunk_logits)}")
        if tokens:
            new += tokens
            cached += cached_tokens
            pairs += chunk_pairs(tokens, cached_tokens)
            logits += chunk_logits
            sequences += 1
    return new, cached, pairs, logits, sequences


def work_of(decode_batch: int, prefill: Iterable[ChunkFields], decode_queries: int = 1) -> Work:
    new, cached, pairs, logits, sequences = prefill_counts(prefill)
    decode_rows = decode_batch * decode_queries
    return Work(decode_batch, new, cached, float(pairs), logits, sequences, decode_queries, decode_rows,
                decode_rows + new, decode_rows + logits)


class SingleQueryAttention:
    """`EngineKernels.attention_seconds` of an iteration whose decodes ask one query each (no speculative verify
    step), from the counts alone: one layer's fused attention kernel at the engine's attention roofline, times the
    layers of each kind. `expanded`, `absorbed`: FLOPs per (query, key) pair in the expanded (prefill) and absorbed
    (decode) forms; `query_width`: query/output bytes per token over ACTIVATION_BYTES; `passes`: reads of a decoding
    sequence's cached K and V per layer; `kv_per_layer`: KV bytes per token and layer on one GPU; `activation_bytes`:
    bytes of a query or output element; `roofline`: the GPU's (attention FLOP/s, fixed bytes, bytes/s), after
    `fill_seconds` of every launch."""

    def __init__(self, expanded: float, absorbed: float, query_width: float, passes: int, kv_per_layer: float,
                 activation_bytes: int, fill_seconds: float, roofline: tuple[float, float, float],
                 layers: tuple[int, ...]):
        self.expanded, self.absorbed, self.query_width = expanded, absorbed, query_width
        self.passes, self.kv_per_layer = passes, kv_per_layer
        self.activation_bytes, self.fill_seconds = activation_bytes, fill_seconds
        self.rate, self.fixed_bytes, self.bytes_per_s = roofline
        self.layers = layers
        # The counts as machine floats (each exact), which `seconds` multiplies without unboxing an int each: every
        # prefill iteration priced asks.
        counts = vec[float]()
        for count in layers:
            counts = append(counts, float(count))
        self._layer_counts = counts

    def __reduce__(self) -> tuple[type[SingleQueryAttention], tuple[object, ...]]:
        """Rebuilt from its arguments (a librt `vec` does not pickle): a cost model pickles and copies with it."""
        return SingleQueryAttention, (self.expanded, self.absorbed, self.query_width, self.passes, self.kv_per_layer,
                                      self.activation_bytes, self.fill_seconds,
                                      (self.rate, self.fixed_bytes, self.bytes_per_s), self.layers)

    def seconds(self, decode_rows: i64, prefill: i64, prefill_cached: i64, prefill_pairs: float,
                decode_context: float) -> float:
        """The attention time of an iteration of `decode_rows` decoding sequences and prefill chunks of `prefill`
        new tokens after `prefill_cached` in all, `prefill_pairs` (query, key) pairs (`Work`'s fields of those
        names), at `decode_context`: to the bit `EngineKernels.attention_seconds`' (`_attention_work`'s and
        `GPURates.attention_seconds`' float operations in their order; one query per decode multiplies by one, which
        changes no value)."""
        absorbed, passes, kv_per_layer = self.absorbed, self.passes, self.kv_per_layer
        flops = absorbed * float(decode_rows) + self.expanded * prefill_pairs
        nbytes = (kv_per_layer * float(passes * decode_rows + prefill + prefill_cached)
                  + float(self.activation_bytes * (decode_rows + prefill)) * self.query_width)
        compute = self.fill_seconds + (flops + absorbed * decode_context) / self.rate
        memory = (nbytes + passes * kv_per_layer * decode_context + self.fixed_bytes) / self.bytes_per_s
        seconds = memory if memory > compute else compute  # max(compute, memory), by comparison: no call
        total = 0.0
        for layers in self._layer_counts:
            total += layers * seconds
        return total
