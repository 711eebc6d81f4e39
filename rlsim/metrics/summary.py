"""The run's headline figures: `summary` is the metrics.json contract of the event engine; `run_metrics` adds the
breakdowns a report shows (per pool, utilisation, MFU, HBM bandwidth, rollout engines, long tail, cost) under keys of
their own."""
from __future__ import annotations

import numpy as np

from rlsim.config.run_length import RunLength, measured_window, short_warmup_warning
from rlsim.events import RUN_END, EventLog
from rlsim.metrics.agents import agent_metrics
from rlsim.metrics.cost import cost
from rlsim.metrics.disaggregation import prefill_decode
from rlsim.metrics.efficiency import decode_hbm_utilisation, mfu, model_flops
from rlsim.metrics.engines import engine_summary
from rlsim.metrics.environments import environment_summary
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.goodput import goodput
from rlsim.metrics.labels import gpu_seconds_by_label, pool_label_seconds, utilisation
from rlsim.metrics.sample_use import sample_use
from rlsim.metrics.sequences import response_length_stats, staleness, staleness_histogram, trained
from rlsim.metrics.steps import long_tail, measured_steps, stage_means, throughput


def summary(log: EventLog, warmup_steps: int) -> dict:
    """The metrics.json contract: step time, verl stage means, throughput, GPU-seconds by label, staleness, simulator.

    Everything here is a function of the scenario and seed alone, so the same inputs give a byte-identical file; the
    host seconds a run took are reported beside it (timing.json), not in it.
    """
    steps = measured_steps(log, warmup_steps) or list(log.steps)
    times = np.array([s.seconds for s in steps]) if steps else np.zeros(1)
    done = trained(log)
    lags = staleness(done) if len(done) else np.zeros(1)
    return {
        "step_time_s": {"mean": float(times.mean()), "p50": float(np.median(times)), "max": float(times.max())},
        "stages_s": stage_means(steps),
        "throughput": throughput(steps, log.gpus),
        "gpu_seconds_by_label": gpu_seconds_by_label(log),
        "staleness": {"mean": float(lags.mean()), "max": int(lags.max())},
        # Rollouts still in flight when the last step ends are the run's horizon, not data a policy threw away.
        "sequences": {"trained": len(done), "dropped": int(log.sequences.dropped_by_a_policy.sum()),
                      "in_flight_at_end": int(log.sequences.dropped_by_mask(lambda name: name == RUN_END).sum()),
                      "truncated_fraction": float(np.mean(done.truncated)) if len(done) else 0.0},
        "simulator": {"events": log.events, "wall_s": log.wall_s},
    }


def run_metrics(log: EventLog, facts: RunFacts) -> dict:
    """Everything `rlsim run` writes to metrics.json: `summary`'s keys, unchanged, plus the report's breakdowns."""
    metrics = summary(log, facts.warmup_steps)
    by_pool = pool_label_seconds(log, facts)
    environments = environment_summary(log, facts.warmup_steps, metrics["step_time_s"]["mean"])
    tails = [row for row in long_tail(log) if row["step"] >= facts.warmup_steps] or long_tail(log)
    flops = model_flops(log, facts)
    metrics["staleness"]["histogram"] = staleness_histogram(log)
    metrics.update({
        "scenario": facts.scenario,
        "gpus": facts.gpus,
        "pools": {pool.name: {"gpu": pool.gpu, "gpus": pool.gpus, "gpu_seconds_by_label": by_pool[pool.name],
                              "utilisation": utilisation(by_pool[pool.name])} for pool in facts.pools},
        "utilisation": utilisation(metrics["gpu_seconds_by_label"]),
        "model_flops": flops,
        "mfu": mfu(log, facts, flops),
        "hbm_bandwidth_utilisation": decode_hbm_utilisation(log, facts),
        "engines": engine_summary(log, facts),
        "long_tail": {"bubble_s_mean": float(np.mean([t["bubble_s"] for t in tails])) if tails else 0.0,
                      "bubble_s_max": max((t["bubble_s"] for t in tails), default=0.0),
                      "tail_gpu_s_per_step": float(np.mean([t["tail_gpu_s"] for t in tails])) if tails else 0.0},
        "response_tokens": response_length_stats(log),
        "sample_use": sample_use(log),
        "cost": cost(metrics["step_time_s"]["mean"], facts,
                     None if environments is None else environments["usd_per_step"]),
        "measured": measured(log, facts),
    })
    disaggregated = prefill_decode(log)
    if disaggregated is not None:
        metrics["prefill_decode"] = disaggregated
    if environments is not None:
        metrics["environments"] = environments
    if facts.long_run is not None:
        metrics["goodput"] = horizon_goodput(log, facts)
    if log.agents:
        metrics["agents"] = agent_metrics(log, facts)
    return metrics


def horizon_goodput(log: EventLog, facts: RunFacts) -> dict:
    """Goodput over run.horizon around the measured steady-state step (rlsim.metrics.goodput)."""
    assert facts.long_run is not None
    steps = measured_steps(log, facts.warmup_steps) or list(log.steps)
    step_s = float(np.mean([s.seconds for s in steps]))
    tokens_per_step = float(np.mean([s.tokens for s in steps]))
    long_run = facts.long_run
    result = goodput(step_s, tokens_per_step, facts.gpus, long_run.times(step_s), long_run.seed)
    result["checkpoint_gib"] = long_run.checkpoint_bytes / 2**30
    return result


def measured(log: EventLog, facts: RunFacts) -> dict:
    """Which steps the averages describe, and a warning when they include the pipeline's fill (not steady state)."""
    length = RunLength(steps=len(log.steps), warmup_steps=facts.warmup_steps)
    return {"warmup_steps": length.warmup_steps, "steps": length.steps,
            "pipeline_fill_steps": facts.pipeline_fill_steps, "window": measured_window(length),
            "warning": short_warmup_warning(length, facts.pipeline_fill_steps, facts.schedule)}
