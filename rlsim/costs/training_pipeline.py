"""The pipeline schedule of training: 1F1B (and Megatron's interleaved 1F1B) played op by op, and what each stage's
GPUs do meanwhile (busy, in the bubble, waiting at the optimizer step's barrier)."""
from __future__ import annotations

from collections.abc import Sequence

from rlsim.costs.training_time import PipelineTime, TrainingTime


def run_pipeline(forward: Sequence[Sequence[TrainingTime]], backward: Sequence[Sequence[TrainingTime]] | None,
                 stages: int) -> list[TrainingTime]:
    """Play the (interleaved) 1F1B schedule over `forward[i][g]` (micro-batch i, chunk g) and likewise `backward` (or
    None for a forward-only pass); each stage's busy time by kind plus its bubble up to the makespan."""
    f_seconds = [[op.total for op in ops] for ops in zip(*forward, strict=True)]  # [chunk][micro-batch]
    b_seconds = None if backward is None else [[op.total for op in ops] for ops in zip(*backward, strict=True)]
    makespan = pipeline_makespan(f_seconds, b_seconds, stages)
    out = []
    for stage in range(stages):
        busy = TrainingTime.sum(op for per_batch in (forward, backward or []) for chunk_ops in per_batch
                                for op in chunk_ops[stage::stages])
        out.append(busy + TrainingTime(pipeline_bubble=max(0.0, makespan - busy.total)))
    return out


def finish(stages: list[TrainingTime], steps: list[TrainingTime]) -> PipelineTime:
    """Add each stage's optimizer step, then the wait for the slowest stage (the gradient-norm all-reduce joins them)."""
    done = [stage + step for stage, step in zip(stages, steps, strict=True)]
    end = max(stage.total for stage in done)
    return PipelineTime(tuple(stage + TrainingTime(barrier=end - stage.total) for stage in done))


def pipeline_makespan(forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]] | None,
                      stages: int) -> float:
    """Wall time of a 1F1B pipeline schedule, played op by op.

    `forward[g][i]` is the time of model chunk g's forward pass on micro-batch i (chunk g runs on stage g % stages;
    more chunks than stages is Megatron's interleaved schedule); `backward` likewise, or None for a forward-only pass.
    Stage s runs min(warm-up, all) forwards, then alternates one forward and one backward, then drains its backwards;
    warm-up is p−s−1 forwards, or (p−s−1)·2 + (v−1)·p chunk-forwards when interleaved (Megatron-LM's schedules.py).
    A forward waits for the previous chunk's forward of the same micro-batch; a backward for the next chunk's backward
    (the last chunk's for its own forward).
    """
    p, chunks = stages, len(forward)
    if chunks % p:
        raise ValueError(f"{chunks} model chunks do not divide over {p} pipeline stages")
    v, m = chunks // p, len(forward[0])
    if v > 1 and m % p:
        raise ValueError(f"the interleaved schedule needs micro-batches ({m}) in multiples of the pipeline stages ({p})")
    total = m * v

    def chunk_of(k: int, stage: int, reverse: bool) -> tuple[int, int]:
        group = (k // p) % v
        virtual = v - 1 - group if reverse else group
        return virtual * p + stage, (k // (p * v)) * p + k % p

    orders = []
    for s in range(p):
        fwd = [("F", *chunk_of(k, s, False)) for k in range(total)]
        if backward is None:
            orders.append(fwd)
            continue
        bwd = [("B", *chunk_of(k, s, True)) for k in range(total)]
        warmup = min(total, (p - s - 1) * 2 + (v - 1) * p if v > 1 else p - s - 1)
        order = fwd[:warmup]
        for j in range(total - warmup):
            order += [fwd[warmup + j], bwd[j]]
        orders.append(order + bwd[total - warmup:])

    done: dict[tuple[str, int, int], float] = {}
    clock = [0.0] * p
    position = [0] * p
    remaining = sum(len(order) for order in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while position[s] < len(orders[s]):
                op = orders[s][position[s]]
                kind, g, i = op
                if kind == "F":
                    dependency = ("F", g - 1, i) if g > 0 else None
                    duration = forward[g][i]
                else:
                    dependency = ("B", g + 1, i) if g < chunks - 1 else ("F", g, i)
                    assert backward is not None
                    duration = backward[g][i]
                if dependency is not None and dependency not in done:
                    break
                start = max(clock[s], done[dependency] if dependency is not None else 0.0)
                clock[s] = done[op] = start + duration
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")  # an ordering bug, never an input error
    return max(clock)
