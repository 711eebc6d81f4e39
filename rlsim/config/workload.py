"""Workload part of the scenario: how long prompts and responses are, how a GRPO group's samples relate, how lengths
drift over training, multi-turn tool use, per-prompt sample budgets, which groups dynamic sampling keeps, and how
rewards are computed.

Each variant is a pydantic model tagged by `kind`, so YAML selects it by name and a bad parameter is reported with its
field path. The runtime objects they describe live in `rlsim.workload` (one registered builder per kind).

A length model is one file in rlsim/workload/length_models/ that holds its parameter class and its builder: the fields
that take one accept the registered kinds (`Variants`), so adding a kind never touches this file. Two parameter classes
stay here because this package uses them itself: `FixedLength` (the judge's default verdict length) and `TraceLength`
(whose path the loader resolves, and whose trace it reads).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from rlsim.config.environments import EnvironmentPool
from rlsim.config.latency import (  # noqa: F401  (re-exported: the latency kinds are workload fields)
    EmpiricalLatency,
    FixedLatency,
    LatencyComponent,
    LatencyModel,
    LognormalLatency,
    LognormalMixtureLatency,
    check_weights,
)
from rlsim.fields import (
    FiniteFloat,
    Frozen,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Probability,
    Registered,
    Variants,
)
from rlsim.registry import LENGTH_MODELS, TOOL_WAITS

# ------------------------------------------------------------------------------------------------ length models

# Every length model takes it, so "what if responses were k times longer?" is one override whatever the model
# (`rlsim run --set workload.response_tokens.scale=2`, `rlsim validate --set ...`).
LengthScale = Annotated[PositiveFloat, Field(description="multiply every length (what if responses were k times longer?)")]


class LengthParams(Frozen):
    """The parameters of a length model, tagged by its `kind` (each kind's class says which)."""

    kind: str


class FixedLength(LengthParams):
    """Every sample has the same length."""

    kind: Literal["fixed"] = Field(description="fixed: every sample has the same length")
    tokens: PositiveInt = Field(description="the length, in tokens")
    scale: LengthScale = 1.0


class TraceLength(LengthParams):
    """Lengths drawn from all those of a recorded trace (PolyTrace packed lengths, or the multi-turn log's prompt and
    trajectory lengths); the path is relative to the scenario file. Groups and order are not kept: `workload.replay`
    replays a trace as recorded."""

    kind: Literal["trace"] = Field(description="trace: lengths drawn from a recorded trace")
    path: str = Field(min_length=1, description="trace file or folder, relative to the scenario file")
    scale: LengthScale = 1.0


# A length model of any registered kind (rlsim/workload/length_models/), as of validation.
StaticLengthModel = Annotated[LengthParams, Variants(LENGTH_MODELS)]


class DriftPoint(Frozen):
    step: int = Field(ge=0, description="policy version (RL step) at which `model` holds")
    model: StaticLengthModel = Field(description="the length model at that step")


class DriftLength(LengthParams):
    """Lengths that change over training: a length model at each listed step, and in between either the earlier one
    (`step`) or a linear blend of the two quantile functions (`linear`: for two lognormals of equal sigma, the median
    moves linearly). Before the first point the first holds, after the last the last."""

    kind: Literal["drift"] = Field(description="drift: lengths that change over training")
    interpolation: Literal["linear", "step"] = Field(
        "linear", description="between two points: linear (blend the quantile functions) or step (keep the earlier)")
    points: list[DriftPoint] = Field(min_length=1, description="the length model at each listed step, in step order")

    @field_validator("points")
    @classmethod
    def _increasing_steps(cls, points: list[DriftPoint]) -> list[DriftPoint]:
        steps = [p.step for p in points]
        if steps != sorted(set(steps)):
            raise ValueError(f"steps must increase strictly, got {steps}")
        return points


# A registered length model, or one that drifts between them over training.
LengthModel = Annotated[LengthParams, Variants(LENGTH_MODELS, also=(DriftLength,))]


class JointComponent(Frozen):
    weight: PositiveFloat = Field(description="relative weight; weights are normalised to sum to 1")
    mean_tokens: tuple[FiniteFloat, FiniteFloat] = Field(description="[prompt, response] means")
    covariance: tuple[tuple[FiniteFloat, FiniteFloat], tuple[FiniteFloat, FiniteFloat]] = Field(
        description="2×2 covariance of [prompt, response]")

    @model_validator(mode="after")
    def _positive_definite(self) -> JointComponent:
        (a, b), (c, d) = self.covariance
        if not math.isclose(b, c, rel_tol=1e-6, abs_tol=1e-9):
            raise ValueError(f"covariance must be symmetric, got off-diagonal {b} and {c}")
        if a <= 0 or d <= 0 or a * d - b * c <= 0:
            raise ValueError("covariance must be positive definite (positive variances, |correlation| < 1)")
        return self


class JointGaussianMixture(Frozen):
    """Prompt and response lengths drawn together from a 2-D Gaussian mixture, as in the production fit of
    PolyTrace's enhanced_task_distribution_parameters.json (`math_task.gmm_parameters`): their correlation is kept."""

    kind: Literal["joint_gaussian_mixture"] = Field(
        description="joint_gaussian_mixture: prompt and response lengths from one 2-D Gaussian mixture")
    components: list[JointComponent] = Field(min_length=1, description="the mixture's components")


# ------------------------------------------------------------------------------------------------ other distributions


class Categorical(Frozen):
    """A count drawn from listed values with relative weights (equal weights when none are given)."""

    values: list[PositiveInt] = Field(min_length=1, description="the counts to draw from")
    weights: list[PositiveFloat] | None = Field(None, description="relative weight of each value (default: equal)")

    @model_validator(mode="after")
    def _weights_match(self) -> Categorical:
        check_weights(self.weights, len(self.values), "values")
        return self


# ------------------------------------------------------------------------------------------------ GRPO groups


class GroupCorrelation(Frozen):
    """How a prompt's samples relate (a Gaussian copula with a per-prompt difficulty factor).

    A prompt draws a difficulty d ~ N(0, 1); each of its samples has the normal score √ρ·d + √(1−ρ)·ε, mapped through
    the response length model's quantile function, so the marginal lengths are exactly the model's. The prompt length's
    normal score has correlation `prompt_response_correlation` with d.
    """

    within_group_correlation: Probability = Field(
        0.0, description="ρ: correlation of two samples' normal scores; for lognormal-like lengths ≈ the intra-class "
        "correlation of ln(length). `rlsim workload fit` calibrates it to a trace")
    prompt_response_correlation: float = Field(0.0, ge=-1.0, le=1.0, allow_inf_nan=False,
                                               description="correlation of the prompt length's "
                                               "normal score with the prompt's difficulty")


# ------------------------------------------------------------------------------------------------ replay


class Replay(Frozen):
    """Replay a recorded trace as it was: its groups (prompt length, the n response lengths; or multi-turn
    trajectories with their turns and tool calls) in the recorded order, step after step, starting again from the
    first step when it runs out. Format is recognised from the files: PolyTrace `packed_lengths_step_*.jsonl` or
    `multiturn_workload_step_*.jsonl[.gz]`."""

    path: str = Field(min_length=1, description="trace file or folder, relative to the scenario file")


# ------------------------------------------------------------------------------------------------ multi-turn


class TurnLimit(Frozen):
    step: int = Field(ge=0, description="policy version (RL step) from which the limit holds")
    turns: PositiveInt = Field(description="most generation turns a trajectory may take (tool-calling turns + the last)")


class MultiTurn(Frozen):
    """Agentic rollouts (Search-R1-like): a trajectory generates a turn, calls tools, appends their responses to its
    context, and generates again, until its final (answer) turn. Turn and tool-response lengths are drawn per
    turn; a per-trajectory factor correlates them (`within_trajectory_correlation`, as `groups` does for samples)."""

    turns: Categorical = Field(description="generation turns per trajectory (tool-calling turns + the answer turn)")
    tool_turn_tokens: LengthModel = Field(description="tokens generated in a turn that ends with tool calls")
    answer_turn_tokens: LengthModel = Field(description="tokens generated in the final turn")
    calls_per_turn: Categorical = Field(default_factory=lambda: Categorical(values=[1]),
                                        description="tool calls a tool-calling turn makes (run concurrently)")
    tool_latency: LatencyModel = Field(description="seconds one tool call takes")
    tool_response_tokens: LengthModel = Field(description="tokens one tool call appends to the context")
    within_trajectory_correlation: Probability = Field(
        0.0, description="correlation of the normal scores of a trajectory's turn and tool-response lengths")
    max_turns: list[TurnLimit] | None = Field(
        None, description="a curriculum over the interaction horizon (TTI, arXiv 2506.07976, grows it over "
        "training): from each listed step on, a trajectory takes at most this many turns; one that would take more "
        "ends after its last allowed turn, truncated. Before the first listed step the first limit holds")

    @field_validator("max_turns")
    @classmethod
    def _increasing_steps(cls, limits: list[TurnLimit] | None) -> list[TurnLimit] | None:
        if limits is not None:
            steps = [limit.step for limit in limits]
            if not steps or steps != sorted(set(steps)):
                raise ValueError(f"steps must increase strictly, got {steps}")
        return limits

    def turn_limit(self, version: int) -> int | None:
        """The most turns a trajectory of policy version `version` may take (None: no limit)."""
        if self.max_turns is None:
            return None
        limit = self.max_turns[0].turns
        for point in self.max_turns:
            if point.step <= version:
                limit = point.turns
        return limit


# ------------------------------------------------------------------------------------------------ budgets, success, filters


class BetaSuccess(Frozen):
    """Per-prompt probability that a sample is correct, Beta-distributed across prompts (mean, and concentration
    a + b: small = prompts are mostly all-right or all-wrong)."""

    mean: float = Field(gt=0, lt=1, allow_inf_nan=False, description="mean probability that a sample is correct, over prompts")
    # Past 1e12 every prompt's rate is the mean to six digits, and the Beta quantile the sampler draws through (scipy's
    # beta.ppf) returns NaN from about 1e20.
    concentration: PositiveFloat = Field(
        2.0, le=1e12, description="a + b of the Beta distribution: small means prompts are mostly all right or all "
        "wrong; large (up to 1e12) that every prompt succeeds at the mean rate")
    length_correlation: float = Field(
        0.0, ge=-1.0, le=1.0, description="correlation of the success rate's normal score with the prompt's length "
        "difficulty (negative: hard prompts, long answers, fewer right)")


class UniformBudget(Frozen):
    """Every prompt gets algorithm.samples_per_prompt samples."""

    kind: Literal["uniform"] = Field(description="uniform: every prompt gets algorithm.samples_per_prompt samples")


class CategoricalBudget(Frozen):
    """Samples per prompt drawn per prompt (e.g. DUET-style varying budgets, or BroRL's hundreds)."""

    kind: Literal["categorical"] = Field(description="categorical: each prompt's number of samples is drawn")
    samples: Categorical = Field(description="samples per prompt, drawn per prompt")


class KnapsackBudget(Frozen):
    """Knapsack RL: a step's budget of prompts × samples_per_prompt samples is split across its prompts to maximise
    the expected number of informative groups (not all right or all wrong), given each prompt's success rate
    (workload.success_rate). Greedy on marginal gains, which is optimal since each gain shrinks with n."""

    kind: Literal["knapsack"] = Field(
        description="knapsack: split the step's samples across prompts to maximise informative groups")
    min_samples: PositiveInt = Field(2, description="fewest samples any prompt gets")
    max_samples: PositiveInt = Field(256, description="most samples any prompt gets")

    @model_validator(mode="after")
    def _ordered(self) -> KnapsackBudget:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples ({self.min_samples}) exceeds max_samples ({self.max_samples})")
        return self


Budget = Annotated[UniformBudget | CategoricalBudget | KnapsackBudget, Field(discriminator="kind")]


class FractionFilter(Frozen):
    """Each group is informative with a fixed probability."""

    kind: Literal["fraction"] = Field(description="fraction: each group is informative with a fixed probability")
    fraction: Probability = Field(description="probability that a group is informative (kept by dynamic sampling)")


class SuccessRateFilter(Frozen):
    """A group is uninformative when all its samples are right or all wrong, drawn from the prompt's success rate
    (workload.success_rate) and its number of samples."""

    kind: Literal["success_rate"] = Field(
        description="success_rate: a group is uninformative when its samples, drawn from the prompt's success rate, are all "
        "right or all wrong")


class TraceFilter(Frozen):
    """Replay recorded dynamic-sampling decisions (PolyTrace dapo_filter_indices.jsonl): the i-th prompt of the k-th
    generation batch is kept when the trace kept it. Groups are matched to the trace in the order they are drawn."""

    kind: Literal["trace"] = Field(description="trace: replay recorded dynamic-sampling decisions")
    path: str = Field(min_length=1, description="PolyTrace dapo_filter_indices.jsonl, relative to the scenario file")


Informative = Annotated[FractionFilter | SuccessRateFilter | TraceFilter, Field(discriminator="kind")]


# ------------------------------------------------------------------------------------------------ rewards


class RuleReward(Frozen):
    """Rule-based reward (math answer check) on a pool of CPU workers."""

    kind: Literal["rule"] = Field(description="rule: a rule-based check (e.g. the math answer) on CPU workers")
    # math-verify in a sequential loop: "200+ seconds" for a 16,384-generation batch (verl-project/verl#1206).
    cpu_seconds_per_sample: NonNegativeFloat = Field(0.012, description="CPU seconds to score one response")
    workers: PositiveInt = Field(32, description="responses scored at once: 1 for verl's default (naive) reward "
                                 "manager, 8 for NeMo-RL's math environment; 32 is a CPU-pool default")


class SandboxReward(Frozen):
    """Code execution in a sandbox: lognormal latency per sample and a cap on concurrent executions.
    `rlsim workload fit` fits both to PolyTrace reward timings."""

    kind: Literal["sandbox"] = Field(description="sandbox: code execution in a sandbox")
    median_latency_s: PositiveFloat = Field(description="median seconds to execute one response")
    latency_sigma: NonNegativeFloat = Field(0.5, le=10, description="standard deviation of ln(latency)")
    concurrency: PositiveInt = Field(64, description="executions the sandbox runs at once")


class ModelReward(Frozen):
    """A reward model scoring each response with a forward pass on GPUs (placement.reward_model says where)."""

    kind: Literal["reward_model"] = Field(description="reward_model: a reward model scores each response with a forward pass")
    model: str = Field(min_length=1, description="catalog model name")


class JudgeReward(Frozen):
    """An LLM judge: a generation engine pool (placement.reward_model says where) reads each prompt and response
    and generates a verdict."""

    kind: Literal["llm_judge"] = Field(description="llm_judge: an LLM generates a verdict on each response")
    model: str = Field(min_length=1, description="catalog model name of the judge")
    instruction_tokens: PositiveInt = Field(256, description="judging instructions added to the prompt and response")
    verdict_tokens: LengthModel = Field(default_factory=lambda: FixedLength(kind="fixed", tokens=256),
                                        description="tokens the judge generates per response")
    max_num_seqs: PositiveInt = Field(256, description="the judge engines' cap on sequences decoded together")


RewardConfig = Annotated[RuleReward | SandboxReward | ModelReward | JudgeReward, Field(discriminator="kind")]


# ------------------------------------------------------------------------------------------------ the workload

# What a trajectory does with its engine slot during tool calls: a policy registered in rlsim/sim/engine/tool_waits.py.
ToolWaitName = Annotated[str, Registered(TOOL_WAITS)]


class Workload(Frozen):
    prompt_tokens: LengthModel | None = Field(None, description="required unless joint_tokens or replay gives it")
    response_tokens: LengthModel | None = Field(
        None, description="required unless joint_tokens, replay or multiturn gives it")
    joint_tokens: JointGaussianMixture | None = Field(
        None, description="prompt and response lengths drawn together (instead of prompt_tokens and response_tokens)")
    groups: GroupCorrelation = Field(
        default_factory=GroupCorrelation, description="how a prompt's samples relate: their lengths' correlation within a group "
        "and with the prompt")
    replay: Replay | None = Field(
        None, description="replay a recorded trace as recorded (lengths, groups, turns), instead of length models")
    multiturn: MultiTurn | None = Field(None, description="agentic rollouts: turns of generation separated by tool calls")
    environments: EnvironmentPool | None = Field(
        None, description="the sandboxes that run tool calls: concurrency, cold starts, CPU cost, autoscaling and "
        "price (default: every call starts at once and takes only its latency)")
    tool_wait: ToolWaitName = Field(
        "hold", description="during a tool call a trajectory keeps its engine slot and KV cache (hold), or frees them "
        "and is re-admitted when the tool returns, re-using whatever of its prefix is still cached (release)")
    samples_per_prompt: Budget = Field(
        default_factory=lambda: UniformBudget(kind="uniform"), description="how many samples each prompt gets: the same for all "
        "(uniform), drawn, or knapsack")
    success_rate: BetaSuccess | None = Field(
        None, description="per-prompt probability that a sample is correct (for success_rate filters and knapsack)")
    informative: Informative | None = Field(
        None, description="which groups dynamic sampling keeps; default: informative_group_fraction")
    informative_group_fraction: Probability = Field(
        1.0, description="chance that a group's rewards differ (not all right or all wrong): the groups DAPO's "
        "dynamic sampling keeps")
    step_length_sigma: float = Field(
        0.0, ge=0.0, le=2.0, description="how much a step's responses as a whole run longer or shorter than the "
        "next's, beyond each response's own draw: every sampled response of a policy version is multiplied by one "
        "factor, lognormal with this σ and mean 1 (so the mean length is kept). PolyTrace's traces show ~0 for text RL "
        "(the per-step spread is the draws'), ~0.07 for video and ~0.15 for code (docs/background/fidelity-evidence.md). "
        "Not for replayed or multi-turn workloads")
    generation_batch_prompts: PositiveInt | None = Field(
        None, description="prompts generated per round while dynamic sampling fills a batch (verl data.gen_batch_size); "
        "default: the batch, then as many as expected to fill it")
    reward: RewardConfig = Field(
        default_factory=lambda: RuleReward(kind="rule"), description="how responses are scored: rule on CPUs, sandbox, reward "
        "model or LLM judge")

    @model_validator(mode="after")
    def _one_source_of_lengths(self) -> Workload:
        given = [name for name in ("prompt_tokens", "response_tokens") if getattr(self, name) is not None]
        if self.replay is not None and (given or self.joint_tokens is not None or self.multiturn is not None):
            raise ValueError("replay gives the prompt and response lengths (and turns) as recorded; remove "
                             + ", ".join(given + ["joint_tokens"] * (self.joint_tokens is not None)
                                         + ["multiturn"] * (self.multiturn is not None)))
        if self.joint_tokens is not None and given:
            raise ValueError(f"joint_tokens gives both prompt and response lengths; remove {', '.join(given)}")
        if self.replay is None and self.joint_tokens is None:
            missing = [name for name in ("prompt_tokens", "response_tokens") if getattr(self, name) is None
                       and not (name == "response_tokens" and self.multiturn is not None)]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required (or joint_tokens, or replay of a trace)")
            if self.multiturn is not None and self.response_tokens is not None:
                raise ValueError("multiturn gives the response as turns; remove response_tokens")
        if self.environments is not None and self.replay is None and self.multiturn is None:
            raise ValueError("environments run tool calls: give multiturn (or replay a multi-turn trace), or remove "
                             "environments")
        if self.informative is not None and self.informative_group_fraction != 1.0:
            raise ValueError("give informative or informative_group_fraction, not both")
        return self

    @property
    def informative_model(self) -> FractionFilter | SuccessRateFilter | TraceFilter:
        """The filter in force: `informative`, or the fixed fraction `informative_group_fraction`."""
        if self.informative is not None:
            return self.informative
        return FractionFilter(kind="fraction", fraction=self.informative_group_fraction)

