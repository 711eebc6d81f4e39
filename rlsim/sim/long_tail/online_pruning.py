"""online_pruning: ARRoL's online rollout pruning (Xu et al., "Prune as You Generate: Online Rollout Pruning for
Faster and Better RLVR", ACL 2026, arXiv 2603.24840).

GRPO and DAPO sample many rollouts a prompt, and many groups come out all right or all wrong, which teaches nothing.
ARRoL starts more rollouts a prompt than it trains, and while they generate, a lightweight quality head trained on the
fly scores each partial rollout's chance of success; at the pruning point it prunes rollouts so that the survivors'
predicted successes come near a target share (the paper's usual ρ = 0.5), and the engine re-batches the survivors,
which alone go on to the log-probability passes and the update. The paper reports up to 1.7x faster training.

What rlsim reads of it is the abstract and a summary of its method (the paper's own text and code were not
available): the parameter names below are rlsim's, its pruning rule is the summary's, and these are assumptions:

- a prompt starts `rollouts_per_prompt` rollouts and trains `algorithm.samples_per_prompt` of them (the group GRPO
  would otherwise train all of); the head scores once, at `prune_at_tokens` response tokens, and prunes as many as
  it can of the difference among the rollouts still generating then (one that already ended is kept, its reward
  known);
- the head calls each partial rollout's eventual correctness right with probability `quality_head_accuracy` (a
  sample's correctness drawn from its prompt's `workload.success_rate`); it prunes one rollout at a time, a
  predicted success while the survivors' predicted share of successes is above the target, else a predicted
  failure;
- correctness does not depend on length in rlsim, so what pruning saves is the tokens of the pruned rollouts past
  the pruning point and their training; a pruned rollout's tokens are recorded as dropped by `online_pruning`;
- a trained group has a useful (non-zero) gradient when its survivors' true outcomes differ (`sample_use`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlsim.config.long_tail import Fail, LongTailKind, LongTailParams, refuse_unless
from rlsim.fields import PositiveInt, Probability
from rlsim.sim.long_tail import register_remedy

if TYPE_CHECKING:
    from rlsim.config.schema import Scenario
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward

# What the sequence records name as the policy that dropped a pruned rollout.
ONLINE_PRUNING = "online_pruning"


class OnlinePruning(LongTailParams):
    """ARRoL's online rollout pruning (the names are rlsim's: the paper's own were not available)."""

    kind: Literal["online_pruning"] = Field(
        description="online_pruning: ARRoL's pruning of partial rollouts by a quality head's predicted success")
    rollouts_per_prompt: int = Field(
        ge=3, le=1024, strict=True,
        description="rollouts a prompt starts with; pruned down to algorithm.samples_per_prompt, which train")
    prune_at_tokens: PositiveInt = Field(
        description="response tokens at which the quality head scores the partial rollouts and prunes")
    target_positive_ratio: Probability = Field(
        0.5, description="the share of predicted successes the pruning steers the survivors toward (ARRoL's ρ, "
        "usually 0.5: a balanced group has the largest reward variance)")
    quality_head_accuracy: float = Field(
        ge=0.5, le=1.0, allow_inf_nan=False,
        description="the chance the quality head calls a partial rollout's eventual correctness right (0.5: a coin, "
        "1: an oracle); the paper's figure was not available, so it has no default")


def choose_pruned(known: list[bool], predicted: list[bool], prune: int, target: float) -> list[int]:
    """Which of the still-generating rollouts to prune, `prune` of them (their indices in `predicted`, the head's call
    of each), so that the survivors' predicted share of successes — with `known`, the outcomes of the rollouts that
    already ended — comes near `target`: one at a time, a predicted success while that share is above the target,
    else a predicted failure (the lowest-valued), the latest of its kind; the other kind when none is left."""
    alive = list(range(len(predicted)))
    positives = sum(known) + sum(predicted)
    total = len(known) + len(predicted)
    pruned: list[int] = []
    for _ in range(min(prune, len(alive))):
        want = positives > target * total
        index = next((i for i in reversed(alive) if predicted[i] == want), alive[-1])
        alive.remove(index)
        pruned.append(index)
        positives -= predicted[index]
        total -= 1
    return pruned


def _controller(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.remedies.online_pruning import OnlinePruningController

    return OnlinePruningController(sim, reward, sampling)


def _launched_per_response(scenario: Scenario) -> float:
    params = scenario.schedule.long_tail
    assert isinstance(params, OnlinePruning)
    return params.rollouts_per_prompt / scenario.algorithm.samples_per_prompt


def _check(scenario: Scenario, fail: Fail) -> None:
    params = scenario.schedule.long_tail
    assert isinstance(params, OnlinePruning)
    algo, workload = scenario.algorithm, scenario.workload
    here = ("schedule", "long_tail")
    refuse_unless(workload.samples_per_prompt.kind == "uniform", fail, ("workload", "samples_per_prompt", "kind"),
                  "online pruning starts rollouts_per_prompt rollouts a prompt and trains samples_per_prompt; it "
                  "needs the same for every prompt", value=workload.samples_per_prompt.kind, valid="uniform")
    refuse_unless(algo.samples_per_prompt >= 2, fail, ("algorithm", "samples_per_prompt"),
                  "a group pruned to one rollout has no advantage to learn from", value=algo.samples_per_prompt,
                  valid="2 or more")
    refuse_unless(params.rollouts_per_prompt > algo.samples_per_prompt, fail, here + ("rollouts_per_prompt",),
                  f"pruning needs more rollouts a prompt than the {algo.samples_per_prompt} that train",
                  value=params.rollouts_per_prompt, valid=f"{algo.samples_per_prompt + 1} to 1024")
    refuse_unless(params.prune_at_tokens < algo.max_response_tokens, fail, here + ("prune_at_tokens",),
                  f"the pruning point must fall before max_response_tokens ({algo.max_response_tokens}), or nothing "
                  "is still generating there", value=params.prune_at_tokens,
                  valid=f"1 to {algo.max_response_tokens - 1}")
    refuse_unless(workload.success_rate is not None, fail, ("workload", "success_rate"),
                  "the quality head predicts each rollout's success, drawn from its prompt's success rate",
                  value=None, valid="{mean: ..., concentration: ...}")
    refuse_unless(workload.replay is None, fail, ("workload", "replay"), "online pruning draws more rollouts than a "
                  "replayed group recorded", value=workload.replay and workload.replay.path,
                  valid="null (a sampled workload)")
    refuse_unless(not algo.dynamic_sampling, fail, ("algorithm", "dynamic_sampling"),
                  "a group's useful gradient is the survivors' here; DAPO's filter over pruned groups is not modelled",
                  value=True, valid="false")


register_remedy("online_pruning")(LongTailKind(
    OnlinePruning, _controller, _launched_per_response, carries_over=False, check=_check))
