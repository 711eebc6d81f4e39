"""Per RL step: time by verl stage, samples and tokens trained, throughput, and the long-tail bubble of generation."""
from __future__ import annotations

import numpy as np

from rlsim.events import STAGES, EventLog, StepRecord
from rlsim.metrics.columns import ordered_sums

GENERATION_LABELS = ("prefill", "decode")


def measured_steps(log: EventLog, warmup_steps: int) -> list[StepRecord]:
    """Steps after the warm-up: the ones step time, throughput and cost describe."""
    return [s for s in log.steps if s.step >= warmup_steps]


def engine_finish_times(log: EventLog) -> dict[int, np.ndarray]:
    """Per RL step: when each rollout engine that generated in it ended its last generation span of the step."""
    spans = log.spans
    generating = np.flatnonzero(spans.labelled(*GENERATION_LABELS) & spans.unit_mask(bool))
    if not generating.size:
        return {}
    step, unit, end = spans.step[generating], spans.unit[generating], spans.end[generating]
    order = np.lexsort((unit, step))
    step, unit, end = step[order], unit[order], end[order]
    first = np.flatnonzero(np.concatenate([[True], (step[1:] != step[:-1]) | (unit[1:] != unit[:-1])]))
    last_end = np.maximum.reduceat(end, first)  # per (step, engine)
    engine_step = step[first]
    bounds = np.flatnonzero(np.concatenate([[True], engine_step[1:] != engine_step[:-1], [True]]))
    return {int(engine_step[a]): last_end[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)}


def long_tail(log: EventLog) -> list[dict]:
    """Per step: the long-tail bubble, from the median engine's finish to the last engine's, and the GPU-seconds
    labelled `tail` (rollout GPUs done while others still generate)."""
    finish = engine_finish_times(log)
    spans = log.spans
    tail = spans.labelled("tail")
    tail_steps = spans.step[tail].astype(np.int64)
    lowest = int(tail_steps.min()) if tail_steps.size else 0
    sums = ordered_sums(tail_steps - lowest, spans.seconds[tail] * spans.gpu_count[tail],
                        int(tail_steps.max()) - lowest + 1 if tail_steps.size else 0)
    tail_gpu_s = {lowest + i: value for i, value in enumerate(sums.tolist())}
    rows = []
    for step in log.steps:
        times = np.sort(finish.get(step.step, np.zeros(0)))
        median = float(np.median(times)) if times.size else step.start
        last = float(times.max()) if times.size else step.start
        rows.append({"step": step.step, "engines": int(times.size), "median_engine_finish_s": median,
                     "last_engine_finish_s": last, "bubble_s": last - median,
                     "tail_gpu_s": tail_gpu_s.get(step.step, 0.0)})
    return rows


def step_rows(log: EventLog) -> list[dict]:
    """The per-step table: start, end and duration, seconds per verl stage, samples and tokens trained, tokens/s,
    and the long-tail bubble."""
    tails = {row["step"]: row for row in long_tail(log)}
    rows = []
    for step in log.steps:
        row: dict = {"step": step.step, "start_s": step.start, "end_s": step.end, "step_time_s": step.seconds}
        row.update({stage: step.stages.get(stage, 0.0) for stage in STAGES})
        row.update({"samples": step.samples, "tokens": step.tokens,
                    "tokens_per_s": step.tokens / step.seconds if step.seconds else 0.0,
                    "tail_bubble_s": tails[step.step]["bubble_s"], "tail_gpu_s": tails[step.step]["tail_gpu_s"]})
        rows.append(row)
    return rows


def stage_means(steps: list[StepRecord]) -> dict[str, float]:
    return {name: float(np.mean([s.stages.get(name, 0.0) for s in steps])) if steps else 0.0 for name in STAGES}


def throughput(steps: list[StepRecord], gpus: int) -> dict[str, float]:
    """Tokens (prompt + response) and samples trained per second of the measured window, and tokens/s per GPU."""
    window = (steps[-1].end - steps[0].start) if steps else 0.0
    tokens = sum(s.tokens for s in steps)
    samples = sum(s.samples for s in steps)
    return {
        "tokens_per_s": tokens / window if window else 0.0,
        "tokens_per_s_per_gpu": tokens / window / gpus if window else 0.0,
        "samples_per_s": samples / window if window else 0.0,
    }
