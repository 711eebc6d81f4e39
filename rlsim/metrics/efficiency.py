"""Model FLOPs utilisation (MFU) and the HBM-bandwidth utilisation of decoding. docs/metrics.md gives the formulas
and says what is counted."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from rlsim.events import TRAINING_STAGES, EventLog
from rlsim.metrics.columns import ordered_sum
from rlsim.metrics.engines import ROLLOUT_ENGINE, engine_tracks
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.sequences import SequenceArrays, trained

# Units of the training ranks (rlsim.sim.build): the policy's `dp…`, and a critic's `critic…` or a reference's `ref…`
# placed with a layout of their own.
TRAINING_UNITS = ("dp", "critic", "ref")
# The verl stages that run on the training layout: forward-only passes and updates.
# The training stages that run on the GPUs: `adv` is the driver's Python work on the host (framework CPU time).
GPU_TRAINING_STAGES = tuple(stage for stage in TRAINING_STAGES if stage != "adv")
GENERATION_LABELS = ("prefill", "decode")


def model_flops(log: EventLog, facts: RunFacts) -> dict[str, float]:
    """Model FLOPs of the whole run, by kind of work.

    generation: every generated response token (trained or dropped) after its prompt, and each group's prompt once
    per engine that held it (prefix sharing); recomputation after a preemption or interruption is not model work.
    inference_passes: per trained sequence, the old log-prob pass (unless the rollout's log-probs are used), the
    reference pass and the critic's values pass
    (2·N·tokens + attention each, the critic without the output head). updates: 3× the forward FLOPs (forward and
    backward) per PPO epoch, actor and critic. reward_model: one forward pass per trained sequence.
    A multi-agent run's: each agent's sequences with its own model, summed.
    """
    if facts.agents:
        parts = [model_flops(replace(log, sequences=log.sequences.take(np.isin(log.sequences.seq_id, agent.seq_ids))),
                             own) for agent, (_, own) in zip(log.agents, facts.agents, strict=True)]
        return {kind: sum(part[kind] for part in parts) for kind in parts[0]}
    policy = facts.policy
    arrays = SequenceArrays.of(log)
    pairs, index = np.unique(np.stack([arrays.engine, arrays.group]), axis=1, return_inverse=True)
    prompts = np.zeros(pairs.shape[1])
    np.maximum.at(prompts, np.ravel(index), arrays.prompt)
    generation = (policy.forward(prompts, lm_head=False)
                  + policy.forward(arrays.generated, context=arrays.prompt))
    done = trained(log)
    tokens = (done.prompt_tokens + done.response_tokens).astype(np.float64)
    actor_forward = policy.forward(tokens)
    critic_forward = policy.forward(tokens, lm_head=False) if facts.critic else 0.0
    passes = actor_forward * (facts.recompute_old_log_prob + facts.ref_model) + critic_forward
    updates = 3.0 * (actor_forward + critic_forward) * facts.ppo_epochs
    reward = facts.reward_model.forward(tokens, lm_head=False) if facts.reward_model is not None else 0.0
    return {"generation": generation, "inference_passes": passes, "updates": updates, "reward_model": reward}


def mfu(log: EventLog, facts: RunFacts, flops: dict[str, float]) -> dict[str, float]:
    """Model FLOPs over peak dense bf16 FLOP/s × GPU-seconds, for three scopes:

    overall: all model FLOPs over every GPU of the cluster for the whole run;
    generation: generation FLOPs over the rollout GPU-seconds labelled prefill or decode;
    training: forward-only passes and updates over the GPU-seconds of the training ranks in those verl stages
    (their barriers, bubbles and exposed communication included, as verl's per-stage MFU does).
    """
    capacity = sum(pool.peak_bf16_flops * pool.gpus for pool in facts.pools) * log.wall_s
    spans = log.spans
    peak_of_gpu = np.array([facts.pool_of_gpu(gpu).peak_bf16_flops for gpu in range(log.gpus)] or [0.0])
    capacity_of_span = peak_of_gpu[spans.first_gpu] * spans.seconds * spans.gpu_count
    generating = spans.labelled(*GENERATION_LABELS)
    training = ~generating & spans.unit_mask(lambda unit: unit.startswith(TRAINING_UNITS)) & spans.stage_mask(
        GPU_TRAINING_STAGES)
    generation_capacity = ordered_sum(capacity_of_span[generating])
    training_capacity = ordered_sum(capacity_of_span[training])
    training = flops["inference_passes"] + flops["updates"]
    return {
        "overall": sum(flops.values()) / capacity if capacity else 0.0,
        "generation": flops["generation"] / generation_capacity if generation_capacity else 0.0,
        "training": training / training_capacity if training_capacity else 0.0,
    }


def decode_hbm_utilisation(log: EventLog, facts: RunFacts) -> dict[str, float]:
    """Bytes decoding reads from HBM over what the rollout GPUs could read while labelled `decode`.

    Each decode-only iteration (the engines' `decode` time) reads the engine's weights once, as the cost model counts
    them for its batch, and every decoding sequence's KV cache: its context, including the token it decodes. Both come
    from the engines' samples exactly: between two samples an engine ran a fixed decode batch for a counted number of
    decode iterations, and each sample carries the KV tokens its decode iterations read so far.
    """
    weight_bytes = kv_bytes = readable = 0.0
    iterations = 0
    # A multi-agent run's engines agent by agent, each with its own model's bytes and its own pool's bandwidth.
    for suffix, own in [(f":{name}", agent) for name, agent in facts.agents] or [("", facts)]:
        reads = _decode_reads(log, own, suffix)
        weight_bytes += reads[0]
        kv_bytes += reads[1]
        readable += reads[2]
        iterations += reads[3]
    read = weight_bytes + kv_bytes
    return {
        "decode": float(read / readable) if readable else 0.0,
        "decode_bytes": float(read),
        "decode_weight_bytes": float(weight_bytes),
        "decode_kv_bytes": float(kv_bytes),
        "decode_iterations": iterations,
    }


def _decode_reads(log: EventLog, facts: RunFacts, suffix: str) -> tuple[float, float, float, int]:
    """The engines ending in `suffix`: weight and KV bytes their decode iterations read, the bytes their GPUs could
    have read while labelled `decode`, and their decode iterations."""
    spans = log.spans
    decoding = spans.labelled("decode") & spans.unit_mask(
        lambda unit: unit.startswith(ROLLOUT_ENGINE) and unit.endswith(suffix))
    decode_gpu_seconds = ordered_sum(spans.seconds[decoding] * spans.gpu_count[decoding])
    iterations = kv_tokens_read = 0
    weight_bytes = 0.0
    for track in engine_tracks(log, suffix=suffix):
        steps = np.diff(track.decode_iterations)
        ran = steps > 0
        weight_bytes += float((steps[ran] * facts.weight_bytes(track.decoding[:-1][ran])).sum())
        iterations += int(track.decode_iterations[-1])
        kv_tokens_read += int(track.decode_kv_read_tokens[-1])
    bandwidth = facts.pool(facts.rollout_pool).hbm_bytes_per_s
    return weight_bytes, kv_tokens_read * facts.kv_bytes_per_token, bandwidth * decode_gpu_seconds, iterations
