"""The staleness bound of an off-policy schedule, in one place: how many groups the producer may admit while the
policy has a given version, which complete groups are still fresh enough to train, and the replacements the producer
may admit for groups dropped after admission.

AReaL's rule: the producer admits a group while fewer than ⌊(version + η + 1)·per_version⌋ groups have been
admitted (a fractional η is verl fully_async's staleness_threshold: that fraction of a batch runs ahead); a group
generated from version v trains version at most v + ⌈η⌉, older ones are dropped (policy "staleness_bound").
One-step-off is the bound η = 1 admitting whole batches: generation of batch k + 1 starts once the policy has
version k.
"""
from __future__ import annotations

import math


class StalenessAdmission:
    def __init__(self, eta: float, per_version: int, batch: int | None = None, *, lead: float | None = None):
        """`per_version` groups train each policy version; `batch`: admit in whole batches of that many groups
        (default: as many as the bound allows). `lead`: the most versions the producer runs ahead, whatever the bound
        (η = .inf or 10^6 would otherwise admit without end); the bound itself still decides which samples are fresh
        enough to train."""
        self.eta = eta
        self.per_version = per_version
        self.batch = batch
        self.max_age = math.ceil(eta) if math.isfinite(eta) else math.inf
        self.lead = eta if lead is None else min(eta, lead)
        if math.isinf(self.lead):
            raise ValueError("an unbounded staleness needs a lead to bound what is admitted")
        self.admitted = 0
        self.replacements = 0  # groups dropped after admission, by the staleness bound or dynamic sampling

    def admit(self, version: int) -> int:
        """Groups the producer may admit now, counted as admitted (0: the bound holds it back until the policy
        moves on or a group is dropped)."""
        allowed = math.floor((version + self.lead + 1) * self.per_version) + self.replacements
        if self.admitted >= allowed:
            return 0
        count = self.batch if self.batch is not None else allowed - self.admitted
        self.admitted += count
        return count

    def fresh(self, oldest_version: int, version: int) -> bool:
        """Whether a group whose first sample started under `oldest_version` may train `version`."""
        return version - oldest_version <= self.max_age

    def replace(self) -> None:
        """A group admitted earlier was dropped: one more may be admitted in its place."""
        self.replacements += 1
