"""From a resolved scenario's config classes to the plain values the cost models take (rlsim.costs.layout), and the
layouts of every GPU role a scenario places: the policy's engines and training, and the reward model or LLM judge."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rlsim.config.bound import Bound
from rlsim.config.framework import Framework
from rlsim.config.schema import (
    Algorithm,
    RewardModelPlacement,
    RolloutPlacement,
    Scenario,
    TrainingPlacement,
    WeightSync,
)
from rlsim.costs.driver import DriverHandOff, per_token_fp32
from rlsim.costs.layout import EngineLayout, HostCopies, MovedState, TrainingLayout, WeightExport
from rlsim.costs.rollout import EngineOverheads
from rlsim.models import ModelSpec

MIB = 2**20


def training_layout(placement: TrainingPlacement) -> TrainingLayout:
    """The training layout a resolved scenario places (load_scenario fills its pool, GPUs and dp): the actor's, or
    a placed critic's or reference's."""
    if placement.pool is None or placement.gpus is None or placement.dp is None:
        raise ValueError("the training placement is not resolved; load scenarios with rlsim.config.load_scenario")
    moved, host = placement.moved_while_generating, placement.offload_host_memory
    return TrainingLayout(
        pool=placement.pool, gpus=placement.gpus, tp=placement.tp, pp=placement.pp, cp=placement.cp, ep=placement.ep,
        dp=placement.dp, virtual_pipeline_stages=placement.virtual_pipeline_stages, backend=placement.backend,
        zero_stage=placement.zero_stage, micro_batch_tokens=placement.micro_batch_tokens,
        forward_micro_batch_tokens=placement.forward_micro_batch_tokens,
        activation_recompute=placement.activation_recompute, overlap_grad_reduce=placement.overlap_grad_reduce,
        sequence_packing=placement.sequence_packing,
        pp_pads_micro_batches=placement.pp_pads_micro_batches, logprob_kernel=placement.logprob_kernel,
        offload_params=placement.offload_params, offload_optimizer=placement.offload_optimizer,
        moved_while_generating=MovedState(weights=moved.weights, optimizer=moved.optimizer),
        offload_weights_per_call=placement.offload_weights_per_call,
        offload_host_memory=HostCopies(weights=host.weights, optimizer=host.optimizer),
        reference_weights=placement.reference_weights, precision=placement.precision, lora_rank=placement.lora_rank,
    )


def engine_layout(placement: RolloutPlacement) -> EngineLayout:
    """The generation engines a resolved scenario places (load_scenario fills the pool)."""
    if placement.pool is None:
        raise ValueError("the rollout placement is not resolved; load scenarios with rlsim.config.load_scenario")
    return EngineLayout(
        pool=placement.pool, gpus=placement.gpus, tp=placement.tp, ep=placement.ep,
        gpu_memory_utilization=placement.gpu_memory_utilization, max_num_seqs=placement.max_num_seqs,
        max_num_batched_tokens=placement.max_num_batched_tokens, engine=placement.engine,
        cuda_graphs=placement.cuda_graphs, sleep_level=placement.sleep_level,
    )


def prefill_layout(placement: RolloutPlacement) -> EngineLayout | None:
    """The prefill engines of a prefill/decode-disaggregated rollout (load_scenario fills their pool), of the decode
    engines' kind, without experts split apart (a prefill batch is large enough to keep every expert busy on one
    engine's TP GPUs); None without them."""
    prefill = placement.prefill
    if prefill is None:
        return None
    if prefill.pool is None:
        raise ValueError("the prefill placement is not resolved; load scenarios with rlsim.config.load_scenario")
    return replace(engine_layout(placement), ep=1, **prefill.model_dump(include={
        "pool", "gpus", "tp", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens"}))


def padded_prompt_tokens(scenario: Scenario) -> int:
    """The length HF generate() engines pad every prompt to at least (placement.rollout.pad_prompts): 0 pads only to
    each batch's longest."""
    if scenario.placement.rollout.pad_prompts == "max_prompt_tokens":
        return scenario.algorithm.max_prompt_tokens
    return 0


def weight_export(sync: WeightSync) -> WeightExport:
    return WeightExport(method=sync.method, bucket_bytes=sync.bucket_mib * MIB, pp_broadcast=sync.pp_broadcast)


def driver_hand_off(framework: Framework, algorithm: Algorithm) -> Callable[[str, int], float]:
    """Seconds the RL driver spends handing `sequences` of the padded batch to the training workers for one call of a
    stage and taking its results back (rlsim.costs.driver); 0 when the workers exchange batches among themselves."""
    rate = framework.driver_batch_bytes_per_s
    if rate is None:
        return lambda stage, sequences: 0.0
    shape = DriverHandOff(algorithm.max_prompt_tokens, algorithm.max_response_tokens, rate)
    return lambda stage, sequences: shape.call_seconds(sequences,
                                                       per_token_fp32(stage, reference=algorithm.ref_model))


def engine_overheads(framework: Framework, layout: EngineLayout) -> EngineOverheads:
    """The CPU-side costs of `layout`'s engines under a scenario's framework overheads (vLLM and SGLang alike, but for
    whether they overlap their CPU work and vLLM's eager kernels; HF generate() eager, without per-request work)."""
    # HF generate() steps its rows as one tensor: no per-request scheduling or bookkeeping grows with them.
    per_sequence = 0.0 if layout.engine == "hf" else framework.engine_step_cpu_per_sequence_s
    return EngineOverheads(
        step_cpu_seconds=framework.engine_step_cpu_s,
        step_cpu_per_sequence_seconds=per_sequence,
        overlap_scheduling=framework.overlaps(layout.engine),
        kernel_launch_seconds=framework.kernel_launch_s,
        eager_op_cpu_seconds=framework.eager_op_cpu_s,
        kernel_gap_seconds=framework.kernel_gap_s,
        cuda_graphs=layout.cuda_graphs,
        cuda_graph_max_tokens=framework.cuda_graph_max_tokens,
        engine=layout.engine,
    )


@dataclass(frozen=True)
class RewardModelRole:
    """A reward model scoring with forward passes on GPUs of its own: its model and training-style layout (no
    optimizer state, no recompute)."""

    spec: ModelSpec
    layout: TrainingLayout


@dataclass(frozen=True)
class JudgeRole:
    """An LLM judge generating verdicts on engines of its own."""

    spec: ModelSpec
    layout: EngineLayout


@dataclass(frozen=True)
class Roles:
    """Every GPU role of a resolved scenario, as the layouts the cost models price, and the GPU group each runs on:
    the role whose GPUs it uses (`actor`: the policy's training GPUs), as `Placement.group_of` names it."""

    rollout: EngineLayout
    training: TrainingLayout
    reward: RewardModelRole | JudgeRole | None  # GPUs of a reward model or LLM judge, else None
    critic: TrainingLayout | None = None  # a critic placed with a layout of its own; None: the actor's layout
    reference: TrainingLayout | None = None  # a reference policy placed so; None: the actor's layout
    groups: tuple[tuple[str, str], ...] = (("critic", "actor"), ("reference", "actor"), ("reward_model", "reward_model"))
    prefill: EngineLayout | None = None  # prefill engines of a prefill/decode-disaggregated rollout; None: none

    def group_of(self, role: str) -> str:
        return "actor" if role == "actor" else dict(self.groups)[role]


def roles(bound: Bound) -> Roles:
    scenario = bound.scenario
    placement = scenario.placement
    reward = scenario.workload.reward
    own: RewardModelRole | JudgeRole | None = None
    if reward.kind in ("reward_model", "llm_judge"):
        gpus = _reward_placement(placement.reward_model)
        assert bound.reward_model is not None, "bind() loads the reward model or judge a scenario names"
        if reward.kind == "reward_model":
            own = RewardModelRole(bound.reward_model, reward_model_layout(gpus))
        else:
            own = JudgeRole(bound.reward_model, EngineLayout(pool=gpus.pool or "", gpus=gpus.gpus or 0, tp=gpus.tp,
                                                             max_num_seqs=reward.max_num_seqs))
    critic = training_layout(placement.critic) if placement.critic is not None else None
    reference = training_layout(placement.reference) if placement.reference is not None else None
    groups = tuple((role, placement.group_of(role)) for role in ("critic", "reference", "reward_model"))
    return Roles(engine_layout(placement.rollout), training_layout(placement.training), own, critic, reference, groups,
                 prefill_layout(placement.rollout))


def reward_model_layout(placement: RewardModelPlacement) -> TrainingLayout:
    """A reward model's forward passes: a training-style layout of tp-way ranks, no optimizer state, no recompute."""
    placement = _reward_placement(placement)
    assert placement.gpus is not None
    return TrainingLayout(pool=placement.pool or "", gpus=placement.gpus, tp=placement.tp,
                          dp=placement.gpus // placement.tp, zero_stage=0, activation_recompute="none")


def _reward_placement(placement: RewardModelPlacement | None) -> RewardModelPlacement:
    if placement is None or placement.pool is None or placement.gpus is None:
        raise ValueError("a reward model or judge needs a resolved placement.reward_model; load scenarios with "
                         "rlsim.config.load_scenario")
    return placement
