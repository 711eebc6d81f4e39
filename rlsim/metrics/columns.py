"""Array helpers the metrics share to read the event log's span table.

Sums are taken in the table's order, one addition after another (np.bincount adds its weights in order), as the
per-record loops they replace did: the same scenario gives byte-identical metrics however they are computed. numpy's
own `sum` adds pairwise, which differs in the last bits.
"""
from __future__ import annotations

import numpy as np

from rlsim.events.tables import SpanTable


def ordered_sum(values: np.ndarray) -> float:
    """Σ values, added one after another in order (as `total += v` in a loop)."""
    if not values.size:
        return 0.0
    return float(np.bincount(np.zeros(values.size, dtype=np.intp), weights=values, minlength=1)[0])


def ordered_sums(keys: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per key in [0, size): Σ of its values, added one after another in order."""
    return np.bincount(keys, weights=values, minlength=size)[:size]


def group_edges(spans: SpanTable, gpus: int, extra: list[int] | None = None) -> np.ndarray:
    """Cut the GPU range at every span's edge (and at `extra`): between two cuts every span covers all GPUs or none,
    so the GPUs of a group have identical timelines."""
    first = spans.first_gpu.astype(np.int64)
    cuts = np.concatenate([[0, gpus], extra or [], first, first + spans.gpu_count])
    return np.unique(cuts.astype(np.int64))


def span_groups(spans: SpanTable, edges: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(span index, group index) of every span (of `mask`) with each group of `edges` it covers, spans in order and
    each span's groups in GPU order."""
    index = np.arange(len(spans)) if mask is None else np.flatnonzero(mask)
    first = spans.first_gpu[index].astype(np.int64)
    lo = np.searchsorted(edges, first)
    hi = np.searchsorted(edges, first + spans.gpu_count[index])
    count = hi - lo
    span = np.repeat(index, count)
    group = np.repeat(lo, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return span, group


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
