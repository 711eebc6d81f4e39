"""ARRoL's online rollout pruning as a synchronous controller: each prompt starts rollouts_per_prompt rollouts; those
the quality head prunes stop at the pruning point and are left out of training, the survivors train
(rlsim.sim.long_tail.online_pruning says why, and what is assumed)."""
from __future__ import annotations

from dataclasses import replace

from rlsim.sim.build import Simulation
from rlsim.sim.dynamic_sampling import Sampling
from rlsim.sim.long_tail.online_pruning import ONLINE_PRUNING, OnlinePruning, choose_pruned
from rlsim.sim.remedies.planned_drops import PlannedDropsController
from rlsim.sim.reward import Reward
from rlsim.workload.batches import PromptGroup


class OnlinePruningController(PlannedDropsController[OnlinePruning]):
    policy = ONLINE_PRUNING
    kind = OnlinePruning

    def __init__(self, sim: Simulation, reward: Reward, sampling: Sampling):
        super().__init__(sim, reward, sampling)
        self.samples = self.params.rollouts_per_prompt

    def _plan(self, group: PromptGroup) -> tuple[PromptGroup, set[int]]:
        """The group with its pruned rollouts stopped at the pruning point, whether its survivors' outcomes differ,
        and which were pruned. Two draws a rollout, pruned or not, so the stream does not depend on the lengths."""
        params = self.params
        count = len(group.response_tokens)
        assert group.success_rate is not None, "the loader refuses online pruning without workload.success_rate"
        correct = self.rng.random(count) < group.success_rate
        called_right = self.rng.random(count) < params.quality_head_accuracy
        at = params.prune_at_tokens
        generating = [i for i, tokens in enumerate(group.response_tokens) if tokens > at]
        ended = [bool(correct[i]) for i in range(count) if group.response_tokens[i] <= at]
        predicted = [bool(correct[i] == called_right[i]) for i in generating]
        prune = count - self.algorithm.samples_per_prompt
        pruned = {generating[i] for i in choose_pruned(ended, predicted, prune, params.target_positive_ratio)}
        survivors = [bool(correct[i]) for i in range(count) if i not in pruned]
        tokens = tuple(at if i in pruned else t for i, t in enumerate(group.response_tokens))
        truncated = tuple(i in pruned or t for i, t in enumerate(group.truncated))
        informative = 0 < sum(survivors) < len(survivors)
        return replace(group, response_tokens=tokens, truncated=truncated, informative=informative), pruned
