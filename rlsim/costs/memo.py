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
thousands of distinct token counts of a run cost a few vectorised blocks instead of a scalar pricing each. It keeps
each block as its pricing returns it, which may be columns that build a key's value when asked: a tuple per key
would put thousands of objects on the heap for the cycle collector to walk in the step that prices them.

Values that take no argument (shape tables, per-layer widths) are not memos: each part computes them when it is built.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)


class Rows(Protocol[V_co]):
    """A priced block's values by row (a list, or columns that build a row when asked)."""

    def __getitem__(self, row: int, /) -> V_co: ...


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


class BlockMemo(Generic[V]):
    """`memo[n]` for an integer n >= 0: its value in the block of `block` consecutive integers around it, which one
    call of `price_block(keys)` prices on first use and returns as `Rows` (a value per key, in order);
    remembered for good, so its keys must be bounded (an engine's token counts are, by its max_num_batched_tokens).
    `len(memo)`: the keys priced so far."""

    __slots__ = ("_blocks", "_block", "_price_block")

    def __init__(self, price_block: Callable[[range], Rows[V]], block: int):
        if block < 1:
            raise ValueError(f"a block holds at least one key, got {block}")
        self._blocks: dict[int, Rows[V]] = {}
        self._price_block = price_block
        self._block = block

    def __getitem__(self, key: int) -> V:
        if key < 0:
            raise KeyError(key)
        index, row = divmod(key, self._block)
        priced = self._blocks.get(index)
        if priced is None:
            first = index * self._block
            priced = self._blocks[index] = self._price_block(range(first, first + self._block))
        return priced[row]

    def __len__(self) -> int:
        return len(self._blocks) * self._block
