"""The one caching style of the cost models.

Every memo in `rlsim.costs` is a `Memo`: a dict owned by one cost-model instance (or one communicator) that prices a
key the first time it is asked for, `memo[key]`. Why this style and not another:

* A hit is a plain dict lookup done in C, with no Python frame: the simulator asks the same few shapes hundreds of
  thousands of times per run (engine iterations, micro-batches, collective sizes), so the hit path is what costs time.
* The key is spelled where the memo is read, and it is the whole input of the priced function (which receives the
  key and nothing else), so a memo cannot return a value priced for a different input.
* It is per instance and unbounded: a cost model prices one layout, whose distinct keys are few (token counts, batch
  sizes, chunk indices), and the memo dies with the model. No eviction, so results never depend on the order asked.

Values that take no argument (shape tables, per-layer widths) are not memos: each part computes them when it is built.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(dict[K, V], Generic[K, V]):
    """`memo[key]` is `price(key)`, priced on first use and remembered."""

    __slots__ = ("_price",)

    def __init__(self, price: Callable[[K], V]):
        super().__init__()
        self._price = price

    def __missing__(self, key: K) -> V:
        value = self[key] = self._price(key)
        return value
