"""fixed: every sample has the same length. Its parameters (`FixedLength`) are in rlsim.config.workload, which uses
them for the judge's default verdict length."""
from __future__ import annotations

from rlsim.config.workload import FixedLength
from rlsim.workload.lengths import FiniteLengths, LengthDistribution, register_length_model, scaled


@register_length_model(FixedLength)
def fixed(model: FixedLength, field: str) -> LengthDistribution:
    return FiniteLengths.of("fixed", scaled([model.tokens], model.scale))
