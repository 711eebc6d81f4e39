"""Per agent of a multi-agent run (scenario `agents:`): its share of the calls, what it generated and trained, its own
stage times, and where its GPUs' seconds went. docs/metrics.md gives the definitions."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from rlsim.events import LABELS, EventLog
from rlsim.events.agents import AgentRecord
from rlsim.metrics.efficiency import decode_hbm_utilisation, mfu, model_flops
from rlsim.metrics.engines import engine_summary
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.labels import range_label_seconds, utilisation
from rlsim.metrics.steps import measured_steps, stage_means


def agent_metrics(log: EventLog, facts: RunFacts) -> dict[str, dict]:
    """Each agent's figures over the measured steps, by agent name in the scenario's order."""
    steps = measured_steps(log, facts.warmup_steps) or list(log.steps)
    measured = {s.step for s in steps}
    window = (steps[-1].end - steps[0].start) if steps else 0.0
    calls = sum(agent.calls_per_trajectory for agent in log.agents)
    return {agent.name: {**_agent(log, agent, measured, window, calls), **_efficiency(log, agent, own)}
            for agent, (_, own) in zip(log.agents, facts.agents, strict=True)}


def _efficiency(log: EventLog, agent: AgentRecord, own: RunFacts) -> dict:
    """The agent's MFU while generating and in training (its FLOPs over its GPUs' seconds), its engines' KV cache
    and the HBM bandwidth its decoding used, from the log seen as the agent's alone: its GPUs' spans, its calls."""
    gpus = np.zeros(log.gpus, dtype=bool)
    for first, count in agent.gpus:
        gpus[first:first + count] = True
    spans = log.spans.take(gpus[log.spans.first_gpu])
    view = replace(log, spans=spans, sequences=log.sequences.take(np.isin(log.sequences.seq_id, agent.seq_ids)))
    single = replace(own, agents=())
    alone = replace(own, agents=((agent.name, single),))  # the agent as the run's only one
    engines = engine_summary(view, alone)
    efficiency = mfu(view, single, model_flops(view, single))
    return {"mfu": {"generation": efficiency["generation"], "training": efficiency["training"]},
            "hbm_bandwidth_utilisation": decode_hbm_utilisation(view, alone),
            "kv_occupancy": engines["kv_occupancy"], "decode_batch_mean": engines["decode_batch_mean"]}


def _agent(log: EventLog, agent: AgentRecord, measured: set[int], window: float, calls: int) -> dict:
    own = [s for s in agent.steps if s.step in measured]
    seconds = {label: 0.0 for label in LABELS}
    for first, count in agent.gpus:
        for label, value in range_label_seconds(log.spans, first, count).items():
            seconds[label] += value
    tokens = sum(s.tokens for s in own)
    total = sum(seconds.values())
    return {
        "model": agent.model,
        "gpus": agent.gpu_count,
        "calls_per_trajectory": agent.calls_per_trajectory,
        "call_share": agent.calls_per_trajectory / calls if calls else 0.0,
        "generated_tokens": agent.generated_tokens,
        "trained_samples_per_step": sum(s.samples for s in own) / len(own) if own else 0.0,
        "tokens_per_s": tokens / window if window else 0.0,
        "tokens_per_s_per_gpu": tokens / window / agent.gpu_count if window and agent.gpu_count else 0.0,
        # From the step's start to the end of its own weight update: the rest of the step it waits for other agents.
        "busy_until_s": sum(s.seconds for s in own) / len(own) if own else 0.0,
        "stages_s": stage_means(own),
        "gpu_seconds_by_label": seconds,
        "label_shares": {label: value / total if total else 0.0 for label, value in seconds.items()},
        "utilisation": utilisation(seconds),
    }
