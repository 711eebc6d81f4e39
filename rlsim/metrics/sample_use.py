"""What became of the samples a run generated: how many trained groups carry a learning signal, how much generation
was thrown away, and whether the staleness bound throws away long responses more often than short ones.

- Useful gradient (Knapsack RL's headline, arXiv 2509.25849: its budget allocation raises GRPO's "effective ratio of
  non-zero policy gradients" by 20-40 %): a group whose rewards are all equal has zero advantage for every sample, so
  it trains nothing. The share of trained groups (and samples) whose rewards differ, as the workload's informative
  model draws it (`workload.informative` or `informative_group_fraction`, per group and per the samples it got).
- Generated, never trained: samples a policy dropped after generating them (dynamic sampling, the staleness bound, a
  full batch), their tokens and their share of every token generated. Rollouts still in flight when the run ended
  are the horizon, not waste, and are counted apart.
- Staleness length bias: a long response starts on an older policy than a short one launched with it, so a staleness
  bound drops it more often. Among the samples a step either trained or dropped for staleness, the drop rate per
  response-length quartile and the longest quartile's rate less the shortest's.
"""
from __future__ import annotations

import numpy as np

from rlsim.events import RUN_END, STALENESS_BOUND, EventLog


def sample_use(log: EventLog) -> dict:
    sequences = log.sequences
    trained = sequences.trained
    return {
        "useful_gradient": _useful_gradient(sequences.group[trained], sequences.informative[trained]),
        "never_trained": _never_trained(log),
        "staleness_length_bias": _staleness_length_bias(log),
    }


def _useful_gradient(groups: np.ndarray, informative: np.ndarray) -> dict:
    if not groups.size:
        return {"group_share": None, "sample_share": None, "groups": 0}
    # A group's samples share its flag, so its first sample speaks for it.
    _, first = np.unique(groups, return_index=True)
    return {"group_share": float(informative[first].mean()), "sample_share": float(informative.mean()),
            "groups": int(first.size)}


def _never_trained(log: EventLog) -> dict:
    sequences = log.sequences
    tokens = sequences.response_tokens.astype(np.int64)
    thrown = sequences.dropped_by_a_policy
    in_flight = sequences.dropped_by_mask(lambda name: name == RUN_END)
    generated = int(tokens.sum())
    by_policy = {name: int(np.count_nonzero(thrown & sequences.dropped_by_mask(lambda n, name=name: n == name)))
                 for name in sequences.dropped_by_names if name not in ("", RUN_END)}
    return {"samples": int(np.count_nonzero(thrown)), "response_tokens": int(tokens[thrown].sum()),
            "token_share": int(tokens[thrown].sum()) / generated if generated else 0.0,
            "by_policy": {name: count for name, count in sorted(by_policy.items()) if count},
            "in_flight_at_end": {"samples": int(np.count_nonzero(in_flight)),
                                 "response_tokens": int(tokens[in_flight].sum())}}


def _staleness_length_bias(log: EventLog) -> dict:
    sequences = log.sequences
    dropped = sequences.dropped_by_mask(lambda name: name == STALENESS_BOUND)
    judged = sequences.trained | dropped
    lengths, was_dropped, ids = sequences.response_tokens[judged], dropped[judged], sequences.seq_id[judged]
    if not np.any(was_dropped):
        return {"dropped": 0, "drop_rate": 0.0, "drop_rate_by_length_quartile": None,
                "long_minus_short_drop_rate": 0.0, "mean_response_tokens": None}
    # Quartiles by rank (length, then sequence id), so ties never make them uneven.
    order = np.lexsort((ids, lengths))
    rates = [float(was_dropped[part].mean()) for part in np.array_split(order, 4)]
    return {
        "dropped": int(np.count_nonzero(was_dropped)),
        "drop_rate": float(was_dropped.mean()),
        "drop_rate_by_length_quartile": rates,
        "long_minus_short_drop_rate": rates[3] - rates[0],
        "mean_response_tokens": {"trained": float(lengths[~was_dropped].mean()) if np.any(~was_dropped) else None,
                                 "dropped": float(lengths[was_dropped].mean())},
    }
