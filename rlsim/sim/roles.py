"""The GPU ranges of the rollout and training roles, as the controller books them: spans of work that occupy both roles
(weight sync, switching), and the idle label of GPUs that wait while another role works. Colocated and hybrid
placements share GPUs between the roles; a shared GPU is booked once."""
from __future__ import annotations

from collections.abc import Generator

import simpy

from rlsim.sim.recorder import Recorder

GPURange = tuple[int, int]  # first GPU index and count


class RoleGPUs:
    """`prefill`: the prefill engines' GPUs of a prefill/decode-disaggregated rollout, which take the rollout GPUs'
    weight updates and idle labels (they generate, and wait as the decode engines do)."""

    def __init__(self, env: simpy.Environment, recorder: Recorder, rollout: GPURange, training: GPURange,
                 prefill: GPURange | None = None):
        self.env = env
        self.recorder = recorder
        self.rollout = rollout
        self.training = training
        self.prefill = prefill

    def span(self, blocks: list[GPURange], label: str, seconds: float, stage: str) -> Generator:
        """The GPU ranges `blocks` busy with `label` for `seconds`, then on."""
        if seconds <= 0:
            return
        start = self.env.now
        for first, count in blocks:
            self.recorder.busy(first, count, start, start + seconds, label, stage)
        yield self.env.timeout(seconds)

    def span_all(self, label: str, seconds: float, stage: str) -> Generator:
        yield from self.span(self.both(), label, seconds, stage)

    def both(self) -> list[GPURange]:
        """GPU ranges of rollout and training, without counting shared GPUs twice."""
        first, count = self.rollout
        t_first, t_count = self.training
        prefill = [self.prefill] if self.prefill is not None else []
        if t_first >= first + count or t_first + t_count <= first:
            return [(first, count), (t_first, t_count), *prefill]
        lo, hi = min(first, t_first), max(first + count, t_first + t_count)
        return [(lo, hi - lo), *prefill]

    def all_context(self, start: float, end: float, label: str, stage: str) -> None:
        for first, count in self.both():
            self.recorder.context(first, count, start, end, label, stage)

    def rollout_context(self, start: float, end: float, label: str, stage: str) -> None:
        for first, count in self._rollout_ranges():
            self.recorder.context(first, count, start, end, label, stage)

    def training_context(self, start: float, end: float, label: str, stage: str) -> None:
        """Training GPUs that do not also generate (colocated GPUs keep the rollout's context)."""
        for first, count in minus_range(self.training, self.rollout):
            self.recorder.context(first, count, start, end, label, stage)

    def rollout_only_context(self, start: float, end: float, label: str, stage: str) -> None:
        """Rollout GPUs that do not train (they wait for new weights while training runs)."""
        for first, count in minus_range(self.rollout, self.training) + self._rollout_ranges()[1:]:
            self.recorder.context(first, count, start, end, label, stage)

    def _rollout_ranges(self) -> list[GPURange]:
        """The rollout engines' GPUs, then the prefill engines' (always GPUs of their own)."""
        return [self.rollout] if self.prefill is None else [self.rollout, self.prefill]


def overlap(a: GPURange, b: GPURange) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def minus_range(a: GPURange, b: GPURange) -> list[GPURange]:
    a0, a1 = a[0], a[0] + a[1]
    b0, b1 = b[0], b[0] + b[1]
    pieces = [(a0, min(a1, b0)), (max(a0, b1), a1)]
    return [(lo, hi - lo) for lo, hi in pieces if hi > lo]
