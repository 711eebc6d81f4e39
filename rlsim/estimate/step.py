"""Napkin math for one RL step, without simulating: every stage priced by the simulator's own cost models on a
handful of representative sequences. It is what a user checks a simulation against, and what `rlsim plan` prunes with;
docs/estimate.md lists how far it is from the simulated steady state on every shipped scenario.

Generation (`rlsim.estimate.generation`): the step's slowest engine, replayed with the simulated engine's continuous
batching (`rlsim.estimate.engine`) on its share of the sequences at evenly spaced quantiles of the response lengths,
plus the step's longest response; capped and long responses decode together at the batch they form, which is the long
tail. Dynamic sampling adds the rounds a synchronous step expects to need.
Training (`rlsim.estimate.training`): the trained sequences at quantiles of their lengths, split over data-parallel
ranks and packed into micro-batches as the simulated trainer does; the slowest rank sets each stage.
Steps combine the stages as the simulator's schedules do in steady state (`_combine`).

The workload enters through its marginals over the run (`rlsim.workload.marginals`): lengths averaged over a drifting
schedule, samples per prompt of a budget, the share of groups dynamic sampling keeps, and for multi-turn trajectories
their tool tokens (prefilled like prompt) and tool waits (which the longest trajectory sits through in full).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from rlsim.config.bound import Bound
from rlsim.config.schedule_kind import schedule_kind
from rlsim.config.schema import Placement, Scenario, StagePhase
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memory import require_all
from rlsim.costs.training import GroupCollectives, TrainingCosts, training_rates
from rlsim.estimate.generation import Engine, Responses, generation_rounds, rollout_engine
from rlsim.estimate.training import RankedTraining, TrainedBatch
from rlsim.events import STAGES as EVENT_STAGES
from rlsim.events import TRAINING_STAGES
from rlsim.pricing.engines import engine_costs, free_collective, judge_kv_tokens
from rlsim.pricing.layouts import JudgeRole, RewardModelRole, Roles, driver_hand_off, roles
from rlsim.pricing.memory import memory_report
from rlsim.pricing.weight_sync import colocated_switch_for, disaggregated_sync_for, reference_load_seconds, role_gpus
from rlsim.topology import GPU, ClusterTopology
from rlsim.workload.filters import drawable_kept_fraction, expected_kept_fraction
from rlsim.workload.lengths import LengthDistribution
from rlsim.workload.marginals import workload_marginals

# The simulator's stages (verl's names, in the order a synchronous step runs them) but `wait`, the trainer's wait for
# engines to stop, which an estimate without engines cannot see.
STAGES = tuple(stage for stage in EVENT_STAGES if stage != "wait")


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
    truncated: float  # fraction of responses hitting the cap
    trained: float  # samples trained per step
    generated: float  # samples generated per step (more under dynamic sampling)
    appended: float  # mean tool-response tokens per sample (multi-turn)
    tool_s: float  # mean seconds a sample waits for tools (multi-turn)
    distribution: LengthDistribution  # of response tokens, before the cap
    cap: int  # response tokens at most
    kept: float  # share of groups dynamic sampling keeps


def _lengths(scenario: Scenario, steps: int) -> _Lengths:
    algo = scenario.algorithm
    marginals = workload_marginals(scenario, steps)
    prompt = marginals.prompt.clipped_mean(algo.max_prompt_tokens)
    # A model length shorter than prompt + max_response_tokens cuts responses earlier; the mean prompt stands for all.
    cap = max(1, min(algo.max_response_tokens, algo.model_len - round(prompt)))
    trained = algo.prompts_per_step * marginals.samples_per_prompt
    generated = trained
    if algo.dynamic_sampling:
        # The drawn groups' share, or the filter's expectation when none of the drawn groups was kept; a filter that
        # keeps ~no group is refused.
        expected = drawable_kept_fraction(scenario)
        generated = trained / (marginals.kept_fraction or expected)
    return _Lengths(prompt, marginals.response.clipped_mean(cap),
                    marginals.response.clipped_fraction(cap), trained, generated, marginals.appended_tokens,
                    marginals.tool_seconds, marginals.response, cap, marginals.kept_fraction)


def estimate_step(bound: Bound) -> StepEstimate:
    scenario, spec = bound.scenario, bound.model
    placement, algo = scenario.placement, scenario.algorithm
    # As the simulation does: a role that does not fit would not start, so there is no step to estimate.
    require_all(memory_report(scenario, spec, {name: hw.gpu for name, hw in bound.pools.items()}, bound.reward_model))
    topology = ClusterTopology.build(bound)
    placed = roles(bound)
    gpus = role_gpus(bound, topology, placed)
    rollout_gpus, training_gpus = gpus.rollout, gpus.training
    lengths = _lengths(scenario, bound.run.steps)
    # Tool responses are prefilled like prompt; a trajectory's context holds them too.
    responses = Responses(max(1, round(lengths.prompt + lengths.appended)), lengths.distribution, lengths.cap)
    batch = _trained_batch(lengths, responses, algo.max_response_tokens)
    stages = {
        "gen": _generation(bound, topology, rollout_gpus, lengths, responses),
        "reward": _reward_model(bound, topology, placed.reward, gpus.reward, batch)
        if isinstance(placed.reward, RewardModelRole) else _reward(bound, placed.reward, lengths),
    }
    layout = placed.training
    rates = training_rates(bound.gpu(layout.pool), scenario.framework.kernel_efficiency(layout.backend))
    collectives = GroupCollectives.on_cluster(topology, training_gpus, layout)
    actor = TrainingCosts(spec, rates, layout, collectives)
    ranks = RankedTraining(layout, batch)
    # A critic or reference placed apart prices with its own layout on its own GPUs.
    critic, critic_ranks = _role_costs(bound, topology, placed.critic, gpus.critic, batch, "value") or (
        TrainingCosts(spec, rates, layout, collectives, head="value"), ranks)
    reference_costs, reference_ranks = _role_costs(bound, topology, placed.reference, gpus.reference, batch, "lm") or (
        actor, ranks)
    switch = colocated_switch_for(bound, topology) if placement.mode == "colocated" else None
    # Weights offloaded per call (verl's param_offload) go out after the log-prob pass and back in for the update.
    call_out, call_in = (switch.call_weights_out_s, switch.call_weights_in_s) if (
        switch is not None and algo.recompute_old_log_prob) else (0.0, 0.0)
    # The driver runs on a training node's host.
    driver = bound.framework(placement.training.pool)
    call = driver_hand_off(driver, algo)
    sequences = len(batch.lengths)

    def hand_off(stage: str) -> float:
        return call(stage, sequences)

    forward = ranks.forward_seconds(actor)
    stages["old_log_prob"] = StageEstimate(
        "old_log_prob", forward + call_out + hand_off("old_log_prob") if algo.recompute_old_log_prob else 0.0,
        f"weights copied back out: {call_out:.2f} s" if call_out else "")
    reference = reference_load_seconds(bound, topology)
    stages["ref"] = StageEstimate("ref", reference_ranks.forward_seconds(reference_costs) + reference + hand_off("ref")
                                  if algo.ref_model else 0.0,
                                  f"reference weights brought in: {reference:.2f} s" if reference else "")
    stages["values"] = StageEstimate(
        "values", critic_ranks.forward_seconds(critic) + hand_off("values") if algo.critic else 0.0)
    stages["adv"] = StageEstimate("adv", driver.trainer_step_overhead_s, "the driver's Python work")
    update, micro_batches = ranks.update_seconds(actor, algo.mini_batches, algo.ppo_epochs)
    note = (f"{algo.mini_batches * algo.ppo_epochs} optimizer step(s) of {micro_batches} micro-batch(es) on the "
            "busiest DP rank")
    if call_in:
        note += f"; weights copied back in: {call_in:.2f} s"
    stages["update_actor"] = StageEstimate("update_actor", update + call_in + hand_off("update_actor"), note)
    stages["update_critic"] = StageEstimate(
        "update_critic", critic_ranks.update_seconds(critic, algo.mini_batches, algo.ppo_epochs)[0] + hand_off("update_critic")
        if algo.critic else 0.0)
    if switch is not None:
        # The engines' sleep is timed with generation, as verl and NeMo-RL time it.
        gen = stages["gen"]
        stages["gen"] = StageEstimate("gen", gen.seconds + switch.sleep_s,
                                      "; ".join(filter(None, (gen.note, f"engines put to sleep: {switch.sleep_s:.2f} s"))))
        stages["weight_sync"] = StageEstimate(
            "weight_sync", switch.total_s - switch.sleep_s, f"reshard {switch.reshard_s:.2f} s, offload+reload "
            f"{switch.offload_s + switch.reload_s + switch.call_weights_in_s + switch.call_weights_out_s:.2f} s, "
            f"wake {switch.wake_s:.2f} s")
    else:
        sync = disaggregated_sync_for(bound, topology)
        stages["weight_sync"] = StageEstimate(
            "weight_sync", sync.total_s, f"{sync.method}: gather {sync.gather_s:.2f} s, transfer "
            f"{sync.transfer_s:.2f} s, load {sync.load_s:.2f} s")
    ordered = tuple(stages[name] for name in STAGES)
    step, overlap = _combine(scenario, stages, placed)
    tokens = lengths.trained * sum(batch.lengths) / len(batch.lengths)
    gpus = sum(pool.gpus for pool in scenario.cluster.pools)
    return StepEstimate(scenario.name, ordered, step, overlap, tokens, gpus)


def _trained_batch(lengths: _Lengths, responses: Responses, max_response_tokens: int) -> TrainedBatch:
    """The step's trained sequences: prompt, then response and tool tokens cut at max_response_tokens (as verl cuts
    multi-turn responses)."""
    prompt = round(lengths.prompt)

    def trained(response: int) -> int:
        return max(1, prompt + min(round(response + lengths.appended), max_response_tokens))

    count = max(1, round(lengths.trained))
    return TrainedBatch(tuple(trained(r) for r in responses.quantiles(count)), trained(responses.longest(count)))


def _generation(bound: Bound, topology: ClusterTopology, rollout_gpus, lengths: _Lengths,
                responses: Responses) -> StageEstimate:
    scenario, algo = bound.scenario, bound.scenario.algorithm
    layout = scenario.placement.rollout
    samples_per_group = lengths.trained / algo.prompts_per_step
    group_cap = scenario.schedule.group_cap(layout.engines)
    groups_per_engine = None if group_cap is None else group_cap / layout.engines
    # A cap on groups in flight caps the sequences an engine runs at once (a group's place is held until its longest
    # sample ends, which this does not price).
    slots = None if groups_per_engine is None else max(1, round(groups_per_engine * samples_per_group))
    engine = rollout_engine(bound, topology, rollout_gpus, slots)
    # Batches generating at once share one long tail (async, within its staleness bound); by default one at a time.
    in_flight = schedule_kind(scenario.schedule.mode).batches_in_flight(scenario.schedule)
    if in_flight is not None:
        in_flight = min(in_flight, bound.run.steps)  # no more batches are in flight than the run has
        seconds = engine.slowest(responses, in_flight * lengths.generated).seconds / in_flight
        note = (f"{in_flight:g} batches in flight under the staleness bound share one tail: "
                f"{in_flight * lengths.generated / layout.engines:.0f} sequences per engine")
    else:
        seconds, note = _batches(engine, responses, lengths, scenario)
    if groups_per_engine is not None:
        note += f"; at most {groups_per_engine:g} groups per engine at once"
    if engine.prefill is not None:
        note += (f"; prompts prefilled on {engine.prefill.engines} prefill engines, KV caches fetched by the "
                 f"{engine.count} decode engines")
    if lengths.truncated > 0.001:
        note += f"; {lengths.truncated:.1%} of responses hit the cap"
    if lengths.tool_s > 0:
        seconds += lengths.tool_s
        note += f"; {lengths.tool_s:.2f} s of tool calls per trajectory"
    if scenario.schedule.long_tail is not None:
        note += f"; a step without its long-tail remedy ({scenario.schedule.long_tail.kind}: `rlsim run` simulates it)"
    if scenario.placement.rollout.scheduling_policy != "fcfs":
        note += (f"; queues served first come, first served, not {scenario.placement.rollout.scheduling_policy} "
                 "(`rlsim run` simulates it)")
    if scenario.agents is not None:
        note += ("; the scenario's own model and placement generating alone, not its agents calling each other in "
                 "turn (`rlsim run` simulates them)")
    return StageEstimate("gen", seconds, note)


def _batches(engine: Engine, responses: Responses, lengths: _Lengths, scenario: Scenario) -> tuple[float, str]:
    """A synchronous step's generation (one-step-off generates the same way, one batch at a time): each round's
    slowest engine, rounds weighted by how likely they run."""
    algo, workload = scenario.algorithm, scenario.workload
    samples_per_group = lengths.trained / algo.prompts_per_step
    if algo.dynamic_sampling and not schedule_kind(scenario.schedule.mode).off_policy:
        batch = workload.generation_batch_prompts
        first = max(algo.prompts_per_step, batch or 0)
        # The controller sizes top-ups by the filter's expected keep rate (rlsim.sim.dynamic_sampling), whatever the groups do.
        top_up = expected_kept_fraction(workload, algo.samples_per_prompt)
        rounds = generation_rounds(algo.prompts_per_step, first, lengths.kept, batch, top_up)
    else:
        rounds = [(1.0, lengths.generated / samples_per_group)]
    runs = [(chance, engine.slowest(responses, groups * samples_per_group)) for chance, groups in rounds]
    seconds = sum(chance * run.seconds for chance, run in runs)
    first_run = runs[0][1]
    share = math.ceil(rounds[0][1] * samples_per_group / engine.count)
    bound = "tail-bound" if first_run.tail_share > 0.5 else "throughput-bound"
    note = (f"{bound}: {share} sequences on the slowest engine at concurrency {first_run.peak_batch} (mean decode "
            f"batch {first_run.mean_batch:.0f}, {first_run.tail_batch} in its last quarter); the longest response "
            f"~{responses.longest(rounds[0][1] * samples_per_group)} tokens")
    if first_run.preemptions:
        note += f"; {first_run.preemptions} preemptions (KV cache full)"
    if len(rounds) > 1:
        expected = sum(chance for chance, _ in rounds)
        note += f"; dynamic sampling: {expected:.2f} rounds expected"
    return seconds, note


def _reward(bound: Bound, role: JudgeRole | None, lengths: _Lengths) -> StageEstimate:
    """A rule, sandbox or LLM-judge reward (a reward model's pass: `_reward_model`)."""
    scenario = bound.scenario
    reward = scenario.workload.reward
    # A synchronous step scores the groups it trains (rlsim.sim.sync); off-policy, every sample as it arrives.
    samples = lengths.generated if schedule_kind(scenario.schedule.mode).off_policy else lengths.trained
    if reward.kind == "rule":
        return StageEstimate("reward", samples * reward.cpu_seconds_per_sample / reward.workers,
                             f"{reward.workers} CPU workers")
    if reward.kind == "sandbox":
        mean_latency = reward.median_latency_s * math.exp(reward.latency_sigma**2 / 2)
        return StageEstimate("reward", samples * mean_latency / reward.concurrency,
                             f"{reward.concurrency} concurrent sandboxes, mean {mean_latency:.2f} s each")
    assert isinstance(role, JudgeRole), "a reward model is priced by _reward_model"
    return _judge(bound, role, lengths)


def _judge(bound: Bound, role: JudgeRole, lengths: _Lengths) -> StageEstimate:
    """The judge's engines read each prompt and response and write a verdict: the throughput bound of generation."""
    from rlsim.workload.lengths import length_schedule

    judge = bound.scenario.workload.reward
    assert judge.kind == "llm_judge"
    layout = role.layout
    engine = engine_costs(bound, role.spec, layout, None, free_collective, policy=False)
    kv_tokens = judge_kv_tokens(bound, layout)
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


def _reward_model(bound: Bound, topology: ClusterTopology, role: RewardModelRole, gpus: tuple[GPU, ...],
                  batch: TrainedBatch) -> StageEstimate:
    """The reward model's forward pass over the step's sequences on its GPUs, its slowest rank's."""
    layout = role.layout
    rates = training_rates(bound.gpu(layout.pool), bound.scenario.framework.kernel_efficiency(layout.backend))
    costs = TrainingCosts(role.spec, rates, layout, GroupCollectives.on_cluster(topology, gpus, layout), head="value")
    return StageEstimate("reward", RankedTraining(layout, batch).forward_seconds(costs),
                         f"reward model {role.spec.name}: one forward pass on {layout.gpus} GPU(s)")


def _role_costs(bound: Bound, topology: ClusterTopology, layout: TrainingLayout | None, gpus: tuple[GPU, ...],
                batch: TrainedBatch, head: Literal["lm", "value"]) -> tuple[TrainingCosts, RankedTraining] | None:
    """The costs and ranks of a critic or reference placed with a layout of its own; None when it has none."""
    if layout is None or not gpus:
        return None
    rates = training_rates(bound.gpu(layout.pool), bound.scenario.framework.kernel_efficiency(layout.backend))
    costs = TrainingCosts(bound.model, rates, layout, GroupCollectives.on_cluster(topology, gpus, layout), head=head)
    return costs, RankedTraining(layout, batch)


# The training stages the simulator may run at once when their roles' GPU groups differ: (stage, role) per phase,
# each phase named as placement.concurrent_stages names it.
CONCURRENT_PHASES: tuple[tuple[StagePhase, tuple[tuple[str, str], ...]], ...] = (
    ("forward", (("old_log_prob", "actor"), ("ref", "reference"), ("values", "critic"))),
    ("update", (("update_critic", "critic"), ("update_actor", "actor"))))
# What the step's note says of roles on different GPU groups, by placement.concurrent_stages.
GROUPS_NOTE = {"all": "the stages of roles on different GPU groups overlapping",
               "updates": "the critic and actor updates overlapping, the forward passes in turn",
               "none": "the stages of roles on different GPU groups in turn"}


def _one_group(placed: Roles) -> bool:
    """Whether every training stage runs on the actor's GPU group."""
    return len({placed.group_of(role) for _, phase in CONCURRENT_PHASES for _, role in phase}) == 1


def _training_seconds(stages: dict[str, StageEstimate], placed: Roles, placement: Placement) -> float:
    """The training stages' wall time: one after another on one GPU group; with roles on several groups, a phase
    whose stages run at once (placement.concurrent_stages) lasts as long as its busiest group, as the simulator's
    controller runs them, and the others as long as their stages together."""
    if _one_group(placed):
        return sum(stages[name].seconds for name in TRAINING_STAGES)
    total = stages["adv"].seconds
    for phase, work in CONCURRENT_PHASES:
        if not placement.runs_at_once(phase):
            total += sum(stages[name].seconds for name, _ in work)
            continue
        busy: dict[str, float] = {}
        for name, role in work:
            busy[placed.group_of(role)] = busy.get(placed.group_of(role), 0.0) + stages[name].seconds
        total += max(busy.values())
    return total


def _combine(scenario: Scenario, stages: dict[str, StageEstimate], placed: Roles) -> tuple[float, str]:
    produce = stages["gen"].seconds + stages["reward"].seconds
    train = _training_seconds(stages, placed, scenario.placement)
    sync = stages["weight_sync"].seconds
    mode = scenario.schedule.mode
    seconds, how = schedule_kind(mode).steady_step(produce, train, sync)
    apart = "" if _one_group(placed) else f" ({GROUPS_NOTE[scenario.placement.concurrent_stages]})"
    return seconds, f"{mode}: {how}{apart}"
