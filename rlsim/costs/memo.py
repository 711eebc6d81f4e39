"""The one caching style of the cost models.

Every memo in `rlsim.costs` is a `Memo`: a dict owned by one cost-model instance (or one communicator) that prices a
key the first time it is asked for, `memo[key]`. Why this style and not another:

* A hit is a plain dict lookup done in C, with no Python frame: the simulator asks the same few shapes hundreds of
  thousands of times per run (engine iterations, micro-batches, collective sizes), so the hit path is what costs time.
* The key is spelled where the memo is read, and it is the whole input of the priced function (which receives the
  key and nothing else), so a memo cannot return a value priced for a different input.
* It is per instance: a cost model prices one layout, whose distinct keys are few (token counts, batch sizes, chunk
  indices), and the memo dies with the model. A memo whose keys keep coming over a long run (training micro-batches,
  whose token counts differ step after step) is given a `limit`: when it holds that many it starts afresh, so a
  thousand-step run's memory does not grow with it. The priced functions are pure, so which keys are remembered never
  changes a result, only how often one is priced.

A function that numpy evaluates over many arguments about as fast as over one (an engine's layer kernels over token
counts) is a `BlockMemo`: a miss prices the whole block of consecutive integers around the key in one call, so the
thousands of distinct token counts of a run cost a few vectorised blocks instead of a scalar pricing each.

Values that take no argument (shape tables, per-layer widths) are not memos: each part computes them when it is built.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(dict[K, V], Generic[K, V]):
    """`memo[key]` is `price(key)`, priced on first use and remembered (up to `limit` keys, then afresh)."""

    __slots__ = ("_limit", "_price")

    def __init__(self, price: Callable[[K], V], limit: int | None = None):
        super().__init__()
        self._price = price
        self._limit = limit

    def __missing__(self, key: K) -> V:
        if self._limit is not None and len(self) >= self._limit:
            self.clear()
        value = self[key] = self._price(key)
        return value

    def remember(self, priced: Iterable[tuple[K, V]]) -> None:
        """Store values priced ahead by other means (numpy over many keys); each must equal `price(key)`. A memo that
        would pass its limit starts afresh first (so it holds at most the limit or this batch)."""
        batch = dict(priced)
        if self._limit is not None and len(self) + len(batch) > self._limit:
            self.clear()
        self.update(batch)


class BlockMemo(dict[int, V], Generic[V]):
    """`memo[n]` for an integer n >= 0, priced on first use together with the `block` consecutive integers around it
    by one call of `price_block(keys)`, which returns one value per key (in order); remembered for good, so its keys
    must be bounded (an engine's token counts are, by its max_num_batched_tokens)."""

    __slots__ = ("_block", "_price_block")

    def __init__(self, price_block: Callable[[range], Iterable[V]], block: int):
        super().__init__()
        if block < 1:
            raise ValueError(f"a block holds at least one key, got {block}")
        self._price_block = price_block
        self._block = block

    def __missing__(self, key: int) -> V:
        if key < 0:
            raise KeyError(key)
        first = key - key % self._block
        keys = range(first, first + self._block)
        self.update(zip(keys, self._price_block(keys), strict=True))
        return dict.__getitem__(self, key)
