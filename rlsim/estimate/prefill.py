"""The prefill engines of a prefill/decode-disaggregated rollout, for `rlsim estimate`: how long they take to prefill a
step's prompts, and what the decode side waits for before its first sequence decodes (as `rlsim.sim.prefill` runs
them: a GRPO group's prompt prefilled once on one prefill engine, its other samples only the token each samples, and
each KV cache fetched by its decode engine, one transfer at a time into each)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rlsim.config.bound import Bound
from rlsim.costs.rollout import EngineCosts, PrefillChunk
from rlsim.pricing.disaggregation import kv_transfer_seconds, prefill_costs, prefill_engines
from rlsim.topology import GPU, ClusterTopology


@dataclass(frozen=True)
class PrefillSide:
    costs: EngineCosts  # one prefill engine's
    engines: int
    max_num_batched_tokens: int
    samples_per_group: float
    decode_engines: int
    transfer_seconds: Callable[[int], float]  # a KV cache of so many tokens into a decode engine

    def seconds(self, prompt: int, sequences: float) -> float:
        """The busiest prefill engine's time over a batch of `sequences`: whole groups each, prefilled in iterations
        of as many prompts as the token budget holds (the group's other samples prefill one token each)."""
        groups = math.ceil(sequences / self.samples_per_group / self.engines)
        per_iteration = max(1, self.max_num_batched_tokens // prompt)
        full, rest = divmod(groups, per_iteration)
        others = max(0, round(self.samples_per_group) - 1)
        iteration = self._iteration(prompt, per_iteration, others)
        return full * iteration + (self._iteration(prompt, rest, others) if rest else 0.0)

    def first_arrival(self, prompt: int) -> float:
        """Before the first sequence decodes: its prompt's prefill iteration, then its KV cache's transfer."""
        return self._iteration(prompt, 1, 0) + self.transfer_seconds(prompt)

    def transfers(self, prompt: int, sequences: float) -> float:
        """One decode engine's share of the batch's KV caches, fetched one after another."""
        return math.ceil(sequences / self.decode_engines) * self.transfer_seconds(prompt)

    def _iteration(self, prompt: int, groups: int, others: int) -> float:
        chunks = [PrefillChunk(prompt)] * groups + [PrefillChunk(1, prompt)] * (groups * others)
        return self.costs.iteration_seconds(prefill=chunks)


def prefill_side(bound: Bound, topology: ClusterTopology, prefill_gpus: tuple[GPU, ...],
                 decode_gpus: tuple[GPU, ...]) -> PrefillSide | None:
    """The scenario's prefill engines as the simulator builds them (rlsim.sim.build); None without them."""
    placement = bound.scenario.placement.rollout
    if placement.prefill is None:
        return None
    layout = prefill_engines(bound)
    seconds = kv_transfer_seconds(bound, topology, [prefill_gpus[:layout.tp]], [decode_gpus[:placement.tp]])
    return PrefillSide(prefill_costs(bound, topology, prefill_gpus), layout.engines, layout.max_num_batched_tokens,
                       bound.scenario.algorithm.samples_per_prompt, placement.engines,
                       lambda tokens: seconds(0, 0, tokens))
