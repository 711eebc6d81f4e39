"""Per RL step: time by verl stage, samples and tokens trained, throughput, and the long-tail bubble of generation."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from rlsim.events import STAGES, EventLog, StepRecord

GENERATION_LABELS = ("prefill", "decode")


def measured_steps(log: EventLog, warmup_steps: int) -> list[StepRecord]:
    """Steps after the warm-up: the ones step time, throughput and cost describe."""
    return [s for s in log.steps if s.step >= warmup_steps]


def engine_finish_times(log: EventLog) -> dict[int, dict[str, float]]:
    """Per RL step, per rollout engine that generated in it: when the engine's last generation span of the step ended."""
    finish: dict[int, dict[str, float]] = defaultdict(dict)
    for span in log.spans:
        if span.label in GENERATION_LABELS and span.unit:
            engines = finish[span.step]
            engines[span.unit] = max(engines.get(span.unit, 0.0), span.end)
    return dict(finish)


def long_tail(log: EventLog) -> list[dict]:
    """Per step: the long-tail bubble, from the median engine's finish to the last engine's, and the GPU-seconds
    labelled `tail` (rollout GPUs done while others still generate)."""
    finish = engine_finish_times(log)
    tail_gpu_s: dict[int, float] = defaultdict(float)
    for span in log.spans:
        if span.label == "tail":
            tail_gpu_s[span.step] += span.seconds * span.gpu_count
    rows = []
    for step in log.steps:
        times = np.array(sorted(finish.get(step.step, {}).values()))
        median = float(np.median(times)) if times.size else step.start
        last = float(times.max()) if times.size else step.start
        rows.append({"step": step.step, "engines": int(times.size), "median_engine_finish_s": median,
                     "last_engine_finish_s": last, "bubble_s": last - median, "tail_gpu_s": tail_gpu_s[step.step]})
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
