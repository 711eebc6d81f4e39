"""Array helpers the metrics share to read the event log's tables.

Sums are taken in the table's order, one addition after another (np.bincount adds its weights in order), as the
per-record loops they replace did: the same scenario gives byte-identical metrics however they are computed. numpy's
own `sum` adds pairwise, which differs in the last bits.
"""
from __future__ import annotations

import numpy as np


def ordered_sum(values: np.ndarray) -> float:
    """Σ values, added one after another in order (as `total += v` in a loop)."""
    if not values.size:
        return 0.0
    return float(np.bincount(np.zeros(values.size, dtype=np.intp), weights=values, minlength=1)[0])


def ordered_sums(keys: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per key in [0, size): Σ of its values, added one after another in order."""
    return np.bincount(keys, weights=values, minlength=size)[:size]


def first_occurrences(keys: np.ndarray, values: np.ndarray) -> dict[int, list[int]]:
    """Per key, its distinct values in order of first occurrence."""
    out: dict[int, list[int]] = {}
    if not keys.size:
        return out
    pairs = keys.astype(np.int64) * (int(values.max()) + 1) + values
    _, first = np.unique(pairs, return_index=True)
    for i in np.sort(first).tolist():
        out.setdefault(int(keys[i]), []).append(int(values[i]))
    return out
