"""Which complete groups a step may train, and how many to launch to fill a batch: every group, or under dynamic
sampling (DAPO) only the informative ones — those whose samples' rewards differ — with the batch topped up by more
generation until enough are kept. Whether a group is informative is decided when the sampler draws it."""
from __future__ import annotations

import math


class KeepAll:
    """Every complete group trains."""

    def keeps(self, informative: bool) -> bool:
        return True

    def launch(self, prompts: int) -> int:
        """Groups to launch for a batch of `prompts`."""
        return prompts

    def top_up(self, missing: int) -> int:
        """Groups to launch when the batch is `missing` groups short and nothing generates."""
        return missing


class DynamicSampling:
    def __init__(self, kept: float, generation_batch: int | None):
        """`kept`: the fraction of groups expected informative; `generation_batch`: verl's gen_batch_size, the
        prompts generated at a time (None: as many as the batch is expected to need)."""
        self.kept = kept
        self.generation_batch = generation_batch

    def keeps(self, informative: bool) -> bool:
        return informative

    def launch(self, prompts: int) -> int:
        return prompts if self.generation_batch is None else max(prompts, self.generation_batch)

    def top_up(self, missing: int) -> int:
        """Whole generation batches, or as many groups as fill the batch at the expected keep rate."""
        if self.generation_batch is not None:
            return self.generation_batch
        return math.ceil(missing / self.kept)


# What a controller composes: one of the two.
Sampling = KeepAll | DynamicSampling
