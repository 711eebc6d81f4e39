"""The generation stage of `rlsim estimate`: the slowest engine of a step, replayed on representative sequences.

A step's generation ends when its last engine does. Engines are alike but for their draws, and the one that ends last
is the one holding the step's longest response; so the estimate replays one engine (`rlsim.estimate.engine`) on its
share of the step: its other sequences at evenly spaced quantiles of the response lengths, spread over its queue in a
low-discrepancy order as random draws would be, and the step's expected longest response submitted last (the latest
a long response starts, the latest it ends). Capped responses are many when the cap truncates: they decode together,
at the batch they form, which is the long-tail phase of the step.

Dynamic sampling without a fixed generation batch generates in rounds (`rlsim.sim.sync`): the batch, then top-ups of
the groups still missing over the kept fraction, each round waiting for its last response. `generation_rounds` gives
the expected rounds from the binomial count of kept groups; each round is priced at its expected size.
Asynchronous generation has at most 1 + η batches in flight under the staleness bound η, so a batch pays its share of
one tail over that many batches (rlsim.estimate.step).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from rlsim.config.bound import Bound
from rlsim.costs.rollout import EngineCosts
from rlsim.estimate.engine import EngineLimits, EngineRun, StaticBatches, engine_run, static_batch_run
from rlsim.estimate.prefill import PrefillSide, prefill_side
from rlsim.pricing.engines import engine_costs, policy_kv_tokens
from rlsim.pricing.layouts import engine_layout, padded_prompt_tokens
from rlsim.pricing.weight_sync import role_gpus
from rlsim.topology import ClusterTopology
from rlsim.workload.lengths import LengthDistribution

# The golden-ratio (Weyl) sequence: the k-th queue position gets quantile rank frac(k·φ), equidistributed at every
# prefix of the queue, as a random order is on average (Kuipers & Niederreiter, Uniform Distribution of Sequences, 1974).
GOLDEN = (math.sqrt(5) - 1) / 2
# A round of dynamic sampling less likely than this is left out (its expected cost is below a thousandth of a round).
NEGLIGIBLE_ROUND = 1e-3
MAX_ROUNDS = 20
MAXIMUM_POINTS = 256  # quadrature points of an expected maximum
TILT_POINTS = 1024  # quantile grid the heaviest engine's lengths are tilted on
TILT_MAX, TILT_BISECTIONS = 50.0, 50  # the tilt, in units of one over the lengths' standard deviation


@dataclass(frozen=True)
class Responses:
    """What one engine's sequences look like: their prompt (and tool-response) tokens and response lengths."""

    prompt: int
    distribution: LengthDistribution
    cap: int

    def quantiles(self, n: int) -> list[int]:
        """n response lengths at evenly spaced quantiles, in a low-discrepancy queue order."""
        return [int(x) for x in self.distribution.lengths(_queue_scores(n), self.cap)]

    def heaviest_quantiles(self, n: int, engines: int) -> list[int]:
        """n response lengths of the engine with the most tokens to generate of `engines` that draw n each: the
        lengths exponentially tilted until their mean is the expected largest engine's (the mean plus the expected
        maximum of `engines` standard normals times the standard error), which is how iid draws look given a large
        sum (Cramér's conditional limit theorem); in a low-discrepancy queue order."""
        grid = self.distribution.lengths((np.arange(TILT_POINTS) + 0.5) / TILT_POINTS, self.cap).astype(float)
        spread = grid.std()
        if n < 2 or engines < 2 or spread == 0:
            return self.quantiles(n)
        wanted = grid.mean() + expected_maximum(stats.norm.ppf, engines) * spread / math.sqrt(n)
        scaled = (grid - grid.max()) / spread
        low, high = 0.0, TILT_MAX
        for _ in range(TILT_BISECTIONS):
            theta = (low + high) / 2
            weights = np.exp(theta * scaled)
            if np.dot(weights, grid) / weights.sum() < wanted:
                low = theta
            else:
                high = theta
        cumulative = np.cumsum(np.exp(low * scaled))
        picks = np.searchsorted(cumulative / cumulative[-1], _queue_scores(n))
        return [int(grid[min(i, TILT_POINTS - 1)]) for i in picks]

    def longest(self, among: float) -> int:
        """The expected longest of `among` draws: a heavy tail's mean maximum lies well above its 1 − 1/(n + 1)
        quantile."""
        return int(round(expected_maximum(lambda u: self.distribution.lengths(u, self.cap), among)))


def expected_maximum(quantile: Callable[[np.ndarray], np.ndarray], among: float) -> float:
    """E[max of `among` iid draws] = ∫ Q(v^(1/n)) dv over v in (0, 1), the maximum's CDF being F^n: midpoint rule."""
    v = (np.arange(MAXIMUM_POINTS) + 0.5) / MAXIMUM_POINTS
    return float(np.mean(quantile(v ** (1 / max(1.0, among)))))


def _queue_scores(n: int) -> np.ndarray:
    """Quantile scores (k + 0.5)/n of n sequences, in the queue order the golden-ratio sequence gives them."""
    ranks = sorted(range(n), key=lambda k: (k * GOLDEN) % 1.0)
    return (np.asarray(ranks, dtype=float) + 0.5) / n


@dataclass(frozen=True)
class Engine:
    costs: EngineCosts
    limits: EngineLimits
    count: int  # engines of the placement
    static: StaticBatches | None = None  # HF generate() engines: how they size their static batches
    prefill: PrefillSide | None = None  # the prefill engines that feed these (decode) engines, when disaggregated

    def slowest(self, responses: Responses, sequences: float) -> EngineRun:
        """The engine that ends a batch of `sequences` last: the one holding the batch's longest response (submitted
        last: the later a long response starts, the later it ends), or the one with the most tokens to generate.
        Fed by prefill engines, it decodes once the first KV cache arrives, and no sooner than the prefill engines
        prefill the batch and its links carry its share of the caches."""
        share = max(1, math.ceil(sequences / self.count))
        longest = [*responses.quantiles(share - 1), responses.longest(sequences)]
        heaviest = responses.heaviest_quantiles(share, self.count)
        runs = [self._run([(responses.prompt, n) for n in lengths]) for lengths in (longest, heaviest)]
        run = max(runs, key=lambda run: run.seconds)
        prefill = self.prefill
        if prefill is None:
            return run
        fed = max(run.seconds, prefill.seconds(responses.prompt, sequences),
                  prefill.transfers(responses.prompt, sequences))
        return replace(run, seconds=prefill.first_arrival(responses.prompt) + fed)


    def _run(self, sequences: list[tuple[int, int]]) -> EngineRun:
        if self.static is not None:
            return static_batch_run(self.costs, self.limits, sequences, self.static)
        return engine_run(self.costs, self.limits, sequences, prefilled=self.prefill is not None)


def rollout_engine(bound: Bound, topology: ClusterTopology, rollout_gpus, max_num_seqs: int | None = None) -> Engine:
    """The scenario's rollout engine as the simulator builds it (rlsim.sim.build): its cost model and limits."""
    layout = engine_layout(bound.scenario.placement.rollout)
    costs = engine_costs(bound, bound.model, layout, topology.group(rollout_gpus[: layout.tp]))
    kv_tokens = policy_kv_tokens(bound)
    slots = layout.max_num_seqs if max_num_seqs is None else min(layout.max_num_seqs, max_num_seqs)
    scenario = bound.scenario
    static = (StaticBatches(scenario.algorithm.max_response_tokens, padded_prompt_tokens(scenario))
              if layout.engine == "hf" else None)
    prefill = prefill_side(bound, topology, role_gpus(bound, topology).prefill, tuple(rollout_gpus))
    return Engine(costs, EngineLimits(slots, layout.max_num_batched_tokens, kv_tokens), layout.engines, static,
                  prefill)


def generation_rounds(target: int, first: int, kept: float, batch: int | None,
                      top_up_kept: float) -> list[tuple[float, float]]:
    """(probability, expected groups given it runs) of each round of a synchronous step that keeps a `kept` share of
    its groups and needs `target` of them: `first` groups, then whole batches of `batch` groups (verl's
    gen_batch_size) or, without one, the missing groups over the share the controller expects to keep
    (`top_up_kept`), until `target` are kept."""
    rounds = [(1.0, float(first))]
    if kept >= 1:
        return rounds
    size = (lambda missing: batch) if batch is not None else (lambda missing: math.ceil(missing / top_up_kept))
    # Probability of each shortfall (groups still missing, 0..target) after the first round.
    shortfall = _after_round(np.eye(target + 1)[target], lambda missing: first, kept, target)
    for _ in range(MAX_ROUNDS):
        runs = shortfall[1:].sum()
        if runs < NEGLIGIBLE_ROUND:
            break
        groups = float(np.dot(shortfall[1:], [size(m) for m in range(1, target + 1)]) / runs)
        rounds.append((float(runs), groups))
        shortfall = _after_round(shortfall, size, kept, target)
    return rounds


def _after_round(shortfall: np.ndarray, size: Callable[[int], int], kept: float, target: int) -> np.ndarray:
    """The shortfall's distribution after one more round, launched only where groups are still missing."""
    after = np.zeros(target + 1)
    after[0] = shortfall[0]
    for missing in range(1, target + 1):
        if shortfall[missing] < NEGLIGIBLE_ROUND * 1e-6:
            continue
        kept_pmf = stats.binom.pmf(np.arange(missing + 1), size(missing), kept)
        kept_pmf[missing] += 1 - kept_pmf.sum()  # keeping as many or more closes the shortfall
        after[missing::-1] += shortfall[missing] * kept_pmf
    return after
