"""The closed form of a fixed decode batch's iterations (`rlsim.costs.rollout`'s fast advance): the iteration time as a
convex piecewise-linear function of the batch's total context, k iterations as a sum of arithmetic series, and its
inverse by binary search."""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

from rlsim.costs.compute import GEMM_FILL_S
from rlsim.costs.engine_kernels import EngineKernels
from rlsim.costs.iteration_work import work_of


@dataclass(frozen=True)
class DecodeProfile:
    """Iteration time of a fixed decode batch as a function of its total context c (KV tokens cached before the step).

    Continuous, nondecreasing, convex and piecewise linear: on piece i, c in [starts[i], starts[i+1]) (the last piece
    unbounded), the time is intercepts[i] + slopes[i]·c. Each iteration adds `batch` tokens to the context.
    """

    batch: int
    starts: tuple[float, ...]
    intercepts: tuple[float, ...]
    slopes: tuple[float, ...]
    # (start, end, intercept, slope) per piece, the last ending at infinity: every stretch an engine plans walks them.
    _pieces: tuple[tuple[float, float, float, float], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ends = (*self.starts[1:], math.inf)
        object.__setattr__(self, "_pieces", tuple(zip(self.starts, ends, self.intercepts, self.slopes, strict=True)))

    def seconds(self, total_context: float) -> float:
        """Time of one iteration at total context `total_context`."""
        i = max(0, bisect_right(self.starts, total_context) - 1)
        return self.intercepts[i] + self.slopes[i] * total_context

    def k_iterations_seconds(self, total_context: float, k: int) -> float:
        """Time of k consecutive iterations from `total_context`: a sum of arithmetic series, one per piece."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        batch, c0, total = self.batch, total_context, 0.0
        last, _, a, b = self._pieces[-1]
        if c0 >= last and k:
            # Every iteration on the last piece, which is unbounded (a whole profile is often that one piece, and an
            # engine prices tens of thousands of stretches): the loop's only series, in the same float operations.
            total += k * (a + b * c0) + b * batch * ((k - 1) * k / 2)
            return total
        for start, end, a, b in self._pieces:
            if end <= c0:
                continue
            # Iteration i runs at context c0 + i·batch; it belongs to this piece when start <= c0 + i·batch < end.
            first = max(0, math.ceil((start - c0) / batch))
            stop = k if end == math.inf else min(k, math.ceil((end - c0) / batch))
            if stop <= first:
                continue
            n = stop - first
            total += n * (a + b * c0) + b * batch * ((first + stop - 1) * n / 2)
        return total

    def iterations_within(self, total_context: float, seconds: float) -> int:
        """The largest k whose `k_iterations_seconds` fits in `seconds`, by binary search on the closed form."""
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError(f"seconds must be finite and >= 0, got {seconds}")
        # Every iteration takes at least the first one (the profile never decreases), which bounds k from above.
        high = int(seconds / self.seconds(total_context)) + 2
        while self.k_iterations_seconds(total_context, high) <= seconds:
            high *= 2
        low = 0  # k_iterations_seconds: at low <= seconds < at high
        while high - low > 1:
            middle = (low + high) // 2
            if self.k_iterations_seconds(total_context, middle) <= seconds:
                low = middle
            else:
                high = middle
        return low


def decode_profile(engine: EngineKernels, batch: int, queries: int = 1) -> DecodeProfile:
    """The iteration time of a decode batch of `batch` sequences on `engine`, each running `queries` tokens (1, or a
    speculative verify step's): every kernel's upper envelope over c >= 0 summed, then the CPU bounds applied (still
    convex piecewise linear)."""
    work = work_of(batch, (), queries)
    kernels, collectives = engine.kernels(work)
    terms: list[list[tuple[float, float]]] = []  # per kernel, the affine pieces (intercept, slope) it maxes over
    constant = sum(c.count * c.seconds for c in collectives)
    launches = sum(k.count for k in kernels) + sum(c.count for c in collectives)
    constant += launches * engine.overheads.kernel_gap_seconds
    for kernel in kernels:
        rates = engine.rates_of(kernel)
        if kernel.kind == "attention":
            memory = (
                kernel.count * rates.attention_memory_seconds(kernel.nbytes),
                kernel.count * kernel.bytes_per_context / rates.attention_bytes_per_s,
            )
        else:
            memory = (
                kernel.count * rates.memory_seconds(kernel.nbytes),
                kernel.count * kernel.bytes_per_context / rates.hbm_bytes_per_s,
            )
        if kernel.kind == "memory":
            terms.append([memory])
            continue
        if kernel.shape is not None:
            # A weight GEMM: fill + max(quantized compute, memory), constant in the context.
            compute_seconds = rates.gemm_compute_seconds(*kernel.shape)
            terms.append([
                (kernel.count * (GEMM_FILL_S + compute_seconds), 0.0),
                (kernel.count * (GEMM_FILL_S + rates.memory_seconds(kernel.nbytes)), memory[1]),
            ])
            continue
        rate = rates.gemm_flops if kernel.kind == "gemm" else rates.attention_flops
        compute = (
            kernel.count * (GEMM_FILL_S + kernel.flops / rate),
            kernel.count * kernel.flops_per_context / rate,
        )
        terms.append([compute, memory])

    breaks = {0.0}
    for pieces in terms:
        for (a1, b1), (a2, b2) in zip(pieces, pieces[1:], strict=False):
            if b1 != b2:
                crossing = (a2 - a1) / (b1 - b2)
                if crossing > 0:
                    breaks.add(crossing)
    starts = sorted(breaks)
    intercepts, slopes = [], []
    for i, start in enumerate(starts):
        probe = (start + starts[i + 1]) / 2 if i + 1 < len(starts) else start + 1.0
        a_sum, b_sum = constant, 0.0
        for pieces in terms:
            # max(pieces, key=value at probe), the first of equal ones, by comparison: a key function is a call a
            # piece, and a run prices a profile for every batch size its engines reach.
            a, b = pieces[0]
            top = a + b * probe
            for a_next, b_next in pieces[1:]:
                value = a_next + b_next * probe
                if value > top:
                    a, b, top = a_next, b_next, value
            a_sum += a
            b_sum += b
        intercepts.append(a_sum)
        slopes.append(b_sum)

    busy_until, then = engine.overheads.cpu_bounds(work.tokens, launches, batch)
    return _apply_cpu_bounds(batch, starts, intercepts, slopes, busy_until, then)


def _apply_cpu_bounds(
    batch: int, starts: list[float], intercepts: list[float], slopes: list[float], floor: float, then: float
) -> DecodeProfile:
    """max(profile, floor) + then. The profile never decreases, so the floor covers one leading stretch of context."""
    out_starts: list[float] = []
    out_a: list[float] = []
    out_b: list[float] = []
    ends = (*starts[1:], math.inf)
    for start, end, a, b in zip(starts, ends, intercepts, slopes, strict=True):
        at_end = a + b * end if end != math.inf else (math.inf if b > 0 else a)
        if at_end <= floor:
            continue  # the whole piece lies under the floor
        if a + b * start < floor:
            start = (floor - a) / b  # the piece rises through the floor (b > 0, since it ends above it)
        out_starts.append(start)
        out_a.append(a + then)
        out_b.append(b)
    if not out_starts or out_starts[0] > 0:
        out_starts.insert(0, 0.0)
        out_a.insert(0, floor + then)
        out_b.insert(0, 0.0)
    return DecodeProfile(batch, tuple(out_starts), tuple(out_a), tuple(out_b))



def combined_profile(parts: list[tuple[float, DecodeProfile]], batch: int) -> DecodeProfile:
    """Σ weight·profile over `parts` (profiles of the same batch): still continuous, nondecreasing, convex and piecewise
    linear for nonnegative weights, with the pieces' starts the union of theirs."""
    starts = sorted({start for _, profile in parts for start in profile.starts})
    intercepts, slopes = [], []
    for start in starts:
        a_sum = b_sum = 0.0
        for weight, profile in parts:
            i = max(0, bisect_right(profile.starts, start) - 1)
            a_sum += weight * profile.intercepts[i]
            b_sum += weight * profile.slopes[i]
        intercepts.append(a_sum)
        slopes.append(b_sum)
    return DecodeProfile(batch, tuple(starts), tuple(intercepts), tuple(slopes))
