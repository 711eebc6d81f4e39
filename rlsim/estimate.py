"""Napkin math for one RL step, without simulating: every stage priced by the cost models at mean lengths, plus a
long-tail bound for generation. It is what a user checks a simulation against, and what `rlsim plan` prunes with.

Generation per engine is the larger of two bounds:
  throughput: the engine's share of sequences, decoded at the concurrency the KV cache and max_num_seqs allow, in waves;
  tail:       the longest response of the step (expected maximum of N samples, capped) decoded alone at batch 1 —
              no amount of GPUs shortens it, which is the long-tail floor of synchronous RL.
Training stages pack each data-parallel rank's sequences of mean length into micro-batches of micro_batch_tokens
(forward-only passes: logprob_micro_batch_tokens; without sequence packing, of the expected longest length, to which
every sequence is padded).

The workload enters through its marginals over the run (`rlsim.workload.marginals`): lengths averaged over a drifting
schedule, samples per prompt of a budget, the extra groups dynamic sampling generates (1 / kept fraction), and for
multi-turn trajectories their tool tokens (prefilled like prompt) and tool waits (which the longest trajectory sits
through in full).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rlsim.config.bound import Bound
from rlsim.config.schema import Scenario
from rlsim.costs.collectives import collective_time
from rlsim.costs.compute import GPURates
from rlsim.costs.memory import kv_bytes_per_token_per_gpu, rollout_memory
from rlsim.costs.rollout import EngineCosts
from rlsim.costs.training import GroupCollectives, TrainingCosts, pipeline_pad_to, training_rates
from rlsim.costs.weight_sync import colocated_switch_for, disaggregated_sync_for, reference_load_seconds, role_gpus
from rlsim.events import STAGES as EVENT_STAGES
from rlsim.topology import ClusterTopology
from rlsim.workload.marginals import workload_marginals

# The simulator's stages (verl's names, in the order a synchronous step runs them) but `wait`, the trainer's wait for
# engines to stop, which an estimate without engines cannot see.
STAGES = tuple(stage for stage in EVENT_STAGES if stage != "wait")
TRAINING_STAGES = ("old_log_prob", "ref", "values", "adv", "update_actor", "update_critic")


@dataclass(frozen=True)
class StageEstimate:
    name: str
    seconds: float
    note: str = ""


@dataclass(frozen=True)
class StepEstimate:
    scenario: str
    stages: tuple[StageEstimate, ...]
    step_s: float
    overlap: str  # how the stages combine into the step
    tokens_per_step: float
    gpus: int

    def stage(self, name: str) -> float:
        return next(s.seconds for s in self.stages if s.name == name)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    def as_dict(self) -> dict:
        return {
            "scenario": self.scenario,
            "step_s": self.step_s,
            "overlap": self.overlap,
            "stages_s": {s.name: s.seconds for s in self.stages},
            "notes": {s.name: s.note for s in self.stages if s.note},
            "throughput": {"tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.gpus},
        }


@dataclass(frozen=True)
class _Lengths:
    prompt: float  # mean prompt tokens, clipped at the cap
    response: float  # mean response tokens, clipped
    longest_response: float  # expected longest response of a step
    truncated: float  # fraction of responses hitting the cap
    trained: float  # samples trained per step
    generated: float  # samples generated per step (more under dynamic sampling)
    appended: float = 0.0  # mean tool-response tokens per sample (multi-turn)
    tool_s: float = 0.0  # mean seconds a sample waits for tools (multi-turn)


def _lengths(scenario: Scenario) -> _Lengths:
    algo = scenario.algorithm
    marginals = workload_marginals(scenario)
    prompt = marginals.prompt.clipped_mean(algo.max_prompt_tokens)
    # A model length shorter than prompt + max_response_tokens cuts responses earlier; the mean prompt stands for all.
    cap = max(1, min(algo.max_response_tokens, algo.model_len - round(prompt)))
    trained = algo.prompts_per_step * marginals.samples_per_prompt
    generated = trained / marginals.kept_fraction if algo.dynamic_sampling else trained
    # The expected maximum of N draws sits near the 1 − 1/(N+1) quantile.
    longest = marginals.response.quantile(1 - 1 / (generated + 1), cap)
    return _Lengths(prompt, marginals.response.clipped_mean(cap), longest,
                    marginals.response.clipped_fraction(cap), trained, generated, marginals.appended_tokens,
                    marginals.tool_seconds)


def estimate_step(bound: Bound) -> StepEstimate:
    scenario, spec = bound.scenario, bound.model
    placement, algo = scenario.placement, scenario.algorithm
    topology = ClusterTopology.build(bound)
    rollout_gpus, training_gpus = role_gpus(bound, topology)
    lengths = _lengths(scenario)
    stages = {
        "gen": _generation(bound, topology, rollout_gpus, lengths),
        "reward": _reward(bound, topology, lengths),
    }
    training_gpu = bound.gpu(placement.training.pool)
    rates = training_rates(training_gpu, scenario.framework.kernel_efficiency(placement.training.backend))
    layout = placement.training
    collectives = GroupCollectives.on_cluster(topology, training_gpus, layout)
    actor = TrainingCosts(spec, rates, layout, collectives)
    critic = TrainingCosts(spec, rates, layout, collectives, head="value")
    sequence = max(1, round(lengths.prompt + min(lengths.response + lengths.appended, algo.max_response_tokens)))
    if not layout.sequence_packing:  # every sequence padded to the step's longest
        sequence = max(sequence, round(lengths.prompt + min(lengths.longest_response + lengths.appended,
                                                            algo.max_response_tokens)))
    per_rank = math.ceil(lengths.trained / (layout.dp or 1))
    everything = _pack(per_rank, sequence, layout.forward_micro_batch_tokens * layout.cp)
    mini_batch = _pack(math.ceil(per_rank / algo.mini_batches), sequence, layout.micro_batch_tokens * layout.cp)
    updates = algo.mini_batches * algo.ppo_epochs
    forward_pad, update_pad = pipeline_pad_to(layout, everything), pipeline_pad_to(layout, mini_batch)
    switch = colocated_switch_for(bound, topology) if placement.mode == "colocated" else None
    # Weights offloaded per call (verl's param_offload) go out after the log-prob pass and back in for the update.
    call_out, call_in = (switch.call_weights_out_s, switch.call_weights_in_s) if (
        switch is not None and algo.recompute_old_log_prob) else (0.0, 0.0)
    stages["old_log_prob"] = StageEstimate(
        "old_log_prob", actor.forward_pass(everything, forward_pad).seconds + call_out
        if algo.recompute_old_log_prob else 0.0, f"weights copied back out: {call_out:.2f} s" if call_out else "")
    reference = reference_load_seconds(bound, topology)
    stages["ref"] = StageEstimate(
        "ref", actor.forward_pass(everything, forward_pad).seconds + reference if algo.ref_model else 0.0,
        f"reference weights brought in: {reference:.2f} s" if reference else "")
    stages["values"] = StageEstimate(
        "values", critic.forward_pass(everything, forward_pad).seconds if algo.critic else 0.0)
    # The driver runs on a training node's host.
    driver = bound.framework(placement.training.pool)
    stages["adv"] = StageEstimate("adv", driver.trainer_step_overhead_s, "the driver's Python work")
    note = f"{updates} optimizer step(s) of {len(mini_batch)} micro-batch(es) per DP rank"
    if call_in:
        note += f"; weights copied back in: {call_in:.2f} s"
    stages["update_actor"] = StageEstimate(
        "update_actor", updates * actor.update(mini_batch, update_pad).seconds + call_in, note)
    stages["update_critic"] = StageEstimate(
        "update_critic", updates * critic.update(mini_batch, update_pad).seconds if algo.critic else 0.0)
    if switch is not None:
        stages["weight_sync"] = StageEstimate(
            "weight_sync", switch.total_s, f"reshard {switch.reshard_s:.2f} s, offload+reload "
            f"{switch.offload_s + switch.reload_s + switch.call_weights_in_s + switch.call_weights_out_s:.2f} s, "
            f"wake {switch.wake_s:.2f} s")
    else:
        sync = disaggregated_sync_for(bound, topology)
        stages["weight_sync"] = StageEstimate(
            "weight_sync", sync.total_s, f"{sync.method}: gather {sync.gather_s:.2f} s, transfer "
            f"{sync.transfer_s:.2f} s, load {sync.load_s:.2f} s")
    ordered = tuple(stages[name] for name in STAGES)
    step, overlap = _combine(scenario, stages)
    tokens = lengths.trained * sequence
    gpus = sum(pool.gpus for pool in scenario.cluster.pools)
    return StepEstimate(scenario.name, ordered, step, overlap, tokens, gpus)


def _generation(bound: Bound, topology: ClusterTopology, rollout_gpus, lengths: _Lengths) -> StageEstimate:
    scenario, spec = bound.scenario, bound.model
    engine_layout = scenario.placement.rollout
    gpu = bound.gpu(engine_layout.pool)
    group = topology.group(rollout_gpus[: engine_layout.tp])
    engine = EngineCosts.for_placement(
        spec, GPURates.from_profile(gpu, scenario.model.dtype), engine_layout,
        (lambda n: collective_time("all_reduce", n, group).seconds) if engine_layout.tp > 1 else None,
        (lambda n: collective_time("all_to_all", n, group).seconds) if engine_layout.ep > 1 else None,
        framework=bound.framework(engine_layout.pool),
    )
    kv_tokens = rollout_memory(scenario, spec, gpu).kv_cache_bytes / kv_bytes_per_token_per_gpu(spec, engine_layout.tp)
    per_engine = math.ceil(lengths.generated / engine_layout.engines)
    # Tool responses are prefilled like prompt; a trajectory's context holds them too.
    prompt, response = max(1, round(lengths.prompt + lengths.appended)), max(1, round(lengths.response))
    concurrency = max(1, min(per_engine, engine_layout.max_num_seqs, int(kv_tokens // (prompt + response))))
    group_cap = scenario.schedule.group_cap(engine_layout.engines)
    groups_per_engine = None if group_cap is None else group_cap / engine_layout.engines
    if groups_per_engine is not None:
        samples_per_group = lengths.trained / scenario.algorithm.prompts_per_step
        concurrency = min(concurrency, max(1, round(groups_per_engine * samples_per_group)))
    per_prefill = max(1, engine_layout.max_num_batched_tokens // prompt)
    prefill = math.ceil(per_engine / per_prefill) * engine.prefill_seconds(prompt, 0, min(per_prefill, per_engine))
    waves = per_engine / concurrency
    throughput = prefill + waves * engine.decode_k_iterations_seconds(concurrency, concurrency * prompt, response)
    longest = max(1, round(lengths.longest_response))
    tail = engine.prefill_seconds(prompt) + engine.decode_k_iterations_seconds(1, prompt, longest - 1) + lengths.tool_s
    if tail > throughput:
        note = f"tail-bound: the longest response (~{longest} tokens) decodes alone for {tail:.1f} s"
    else:
        note = (f"throughput-bound: {per_engine} sequences per engine at concurrency {concurrency} "
                f"({waves:.1f} waves); tail bound {tail:.1f} s")
    if groups_per_engine is not None:
        note += (f"; at most {groups_per_engine:g} groups per engine at once (a group keeps its place until its "
                 "longest sample ends, which these waves do not price)")
    if lengths.truncated > 0.001:
        note += f"; {lengths.truncated:.1%} of responses hit the cap"
    if lengths.tool_s > 0:
        note += f"; {lengths.tool_s:.2f} s of tool calls per trajectory"
    if lengths.generated > lengths.trained:
        note += f"; dynamic sampling generates {lengths.generated / lengths.trained:.2f}× the batch"
    return StageEstimate("gen", max(tail, throughput), note)


def _reward(bound: Bound, topology: ClusterTopology, lengths: _Lengths) -> StageEstimate:
    scenario = bound.scenario
    reward = scenario.workload.reward
    samples = lengths.generated
    if reward.kind == "rule":
        return StageEstimate("reward", samples * reward.cpu_seconds_per_sample / reward.workers,
                             f"{reward.workers} CPU workers")
    if reward.kind == "sandbox":
        mean_latency = reward.median_latency_s * math.exp(reward.latency_sigma**2 / 2)
        return StageEstimate("reward", samples * mean_latency / reward.concurrency,
                             f"{reward.concurrency} concurrent sandboxes, mean {mean_latency:.2f} s each")
    if reward.kind == "llm_judge":
        return _judge(bound, topology, lengths)
    return StageEstimate("reward", 0.0, "reward model on GPUs: priced by the simulator, not the estimate")


def _judge(bound: Bound, topology: ClusterTopology, lengths: _Lengths) -> StageEstimate:
    """The judge's engines read each prompt and response and write a verdict: the throughput bound of generation."""
    from rlsim.models import ModelCatalog
    from rlsim.sim.build import judge_scenario
    from rlsim.workload.lengths import length_schedule

    scenario = bound.scenario
    judge, placement = scenario.workload.reward, scenario.placement.reward_model
    assert judge.kind == "llm_judge" and placement is not None
    spec = ModelCatalog.load().spec(judge.model)
    gpu = bound.gpu(placement.pool)
    layout = judge_scenario(scenario).placement.rollout
    engine = EngineCosts.for_placement(spec, GPURates.from_profile(gpu, scenario.model.dtype), layout, None, None,
                                       framework=bound.framework(placement.pool))
    kv_tokens = rollout_memory(judge_scenario(scenario), spec, gpu).kv_cache_bytes / kv_bytes_per_token_per_gpu(
        spec, layout.tp)
    verdict = max(1, round(length_schedule(judge.verdict_tokens).at(0).clipped_mean(1 << 30)))
    prompt = max(1, round(lengths.prompt + lengths.response + lengths.appended + judge.instruction_tokens))
    per_engine = math.ceil(lengths.trained / layout.engines)
    concurrency = max(1, min(per_engine, layout.max_num_seqs, int(kv_tokens // (prompt + verdict))))
    per_prefill = max(1, layout.max_num_batched_tokens // prompt)
    prefill = math.ceil(per_engine / per_prefill) * engine.prefill_seconds(prompt, 0, min(per_prefill, per_engine))
    waves = per_engine / concurrency
    seconds = prefill + waves * engine.decode_k_iterations_seconds(concurrency, concurrency * prompt, verdict)
    return StageEstimate("reward", seconds, f"LLM judge {judge.model} on {layout.engines} engine(s): {per_engine} "
                         f"verdicts of ~{verdict} tokens each (TP collectives not priced here)")


def _pack(sequences: int, length: int, capacity_tokens: int) -> list[list[int]]:
    """Micro-batches of whole sequences, each holding at most `capacity_tokens` (at least one sequence)."""
    per_micro = max(1, capacity_tokens // length)
    full, rest = divmod(sequences, per_micro)
    return [[length] * per_micro for _ in range(full)] + ([[length] * rest] if rest else [])


def _combine(scenario: Scenario, stages: dict[str, StageEstimate]) -> tuple[float, str]:
    produce = stages["gen"].seconds + stages["reward"].seconds
    train = sum(stages[name].seconds for name in TRAINING_STAGES)
    sync = stages["weight_sync"].seconds
    if scenario.schedule.mode == "sync":
        return produce + train + sync, "sync: gen + reward + training stages + weight_sync"
    # Off-policy schedules overlap generation of the next step with training of this one: the slower side sets the pace.
    return max(produce, train) + sync, f"{scenario.schedule.mode}: max(gen + reward, training stages) + weight_sync"
