"""Admission by predicted peak KV: the Past-Future scheduler's rule (`placement.rollout.admission: past_future`).

vLLM V1 and SGLang admit the queue's head when its context fits the KV cache *now* (`current_kv`); the running
sequences then grow one token per iteration, the cache fills, and the latest admitted are preempted and recompute
everything they generated. The Past-Future scheduler (Gong et al., ASPLOS 2025, arXiv 2507.10150; LightLLM's
scheduler) admits only when the batch's *peak* occupancy over its future still fits: each running sequence holds its
KV now and grows until its predicted end, when it frees everything it held. Occupancy `t` iterations ahead is

    M(t) = used + t · #{running: r ≥ t} − Σ{running: r < t} own,

`r` a sequence's predicted remaining tokens and `own` its KV tokens now (its growth until its end is freed with it),
and the peak is M at one of the `r`. Decoding leaves M unchanged in absolute time while every sequence stays within
its prediction (each token written is a token the formula already counted), and only raises it once a sequence
outgrows its prediction (its remaining is then taken as one more token, and its KV keeps growing): during a decode
stretch a head that does not fit never comes to fit, so the fast mode's stretches and planned boundaries, which
assume that of the `current_kv` rule, need no change (the rule is checked on top of it, never instead of it).

rlsim's predictions are per rollout — the scheduler's `_predicted`, the true length times the length predictor's
lognormal error (`schedule.length_predictor_noise`) — where the paper predicts from the historical distribution of
output lengths; with noise 0 the rule is an oracle's. Shared prompts are counted as held until the end (the peak is
over-estimated by a group's prompt once its last sequence would have left).
"""
from __future__ import annotations

from collections.abc import Iterable


def predicted_peak_tokens(used: int, sequences: Iterable[tuple[int, int]]) -> int:
    """The KV cache's predicted peak occupancy, `used` tokens held now by `sequences`, each (predicted remaining
    tokens, at least 1; KV tokens it holds now)."""
    ordered = sorted(sequences)
    count = len(ordered)
    peak = used
    freed = 0  # the KV of the sequences predicted to have ended
    i = 0
    while i < count:
        remaining = ordered[i][0]
        peak = max(peak, used + remaining * (count - i) - freed)
        while i < count and ordered[i][0] == remaining:
            freed += ordered[i][1]
            i += 1
    return peak
