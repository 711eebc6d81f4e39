"""trace: lengths drawn from all those of a recorded trace. Its parameters (`TraceLength`) are in rlsim.config.workload,
whose loader resolves the trace's path and reads it, so a bad trace fails at load time."""
from __future__ import annotations

from pathlib import Path

from rlsim.config.workload import TraceLength
from rlsim.workload.lengths import FiniteLengths, LengthDistribution, register_length_model, scaled


@register_length_model(TraceLength)
def trace(model: TraceLength, field: str) -> LengthDistribution:
    from rlsim.traces import read_lengths

    return FiniteLengths.of("trace", scaled(read_lengths(Path(model.path), field), model.scale))
