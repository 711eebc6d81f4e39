"""Prompt groups for each RL step: a prompt length, its samples' response lengths (or multi-turn trajectories), and
whether the group is informative (its rewards differ, so dynamic sampling keeps it).

GRPO groups are correlated — a hard prompt gets long answers from all its samples. Sampled groups use a Gaussian
copula with a per-prompt difficulty d ~ N(0, 1): sample j of prompt i has the normal score z = √ρ·dᵢ + √(1 − ρ)·εᵢⱼ and
the length Q(Φ(z)), Q the response model's quantile function at the current policy version (so drift applies and the
marginal is exactly the model's). The prompt length's score, and the prompt's success rate, are correlated with d.
Replay hands out the recorded groups instead. Responses are clipped at max_response_tokens, or earlier where prompt +
response would pass max_sequence_tokens (the engine's model length), and marked truncated when they reach the cap.
Randomness comes only from the Generators passed in, so a seed fixes every batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.config.schema import Algorithm
from rlsim.config.workload import Workload
from rlsim.workload.budgets import budget_policy
from rlsim.workload.filters import filter_policy
from rlsim.workload.lengths import length_schedule
from rlsim.workload.multiturn import Trajectory, TrajectorySampler, Turn
from rlsim.workload.replay import ReplaySource


@dataclass(frozen=True)
class PromptGroup:
    group: int
    prompt_tokens: int
    response_tokens: tuple[int, ...]  # tokens each sample generates (all its turns)
    truncated: tuple[bool, ...]
    turns: tuple[tuple[Turn, ...], ...] | None = None  # each sample's turns (multi-turn workloads)
    informative: bool = True
    success_rate: float | None = None


class GroupSampler:
    """Draws prompt groups in order; group ids count up across steps. `version` (the policy version generating them)
    selects the lengths of a drifting workload."""

    def __init__(self, workload: Workload, algo: Algorithm, rng: np.random.Generator, filter_rng: np.random.Generator,
                 step_scale_seed: int = 0):
        self._cap = algo.max_response_tokens
        self._max_prompt = algo.max_prompt_tokens
        self._model_len = algo.model_len
        self._rng = rng
        self._filter_rng = filter_rng
        self._decide = filter_policy(workload.informative_model)
        self._allocate = budget_policy(workload.samples_per_prompt, algo.samples_per_prompt)
        self._groups = workload.groups
        self._replay = ReplaySource(Path(workload.replay.path)) if workload.replay is not None else None
        self._joint = workload.joint_tokens
        self._prompt = length_schedule(workload.prompt_tokens, "input") if workload.prompt_tokens else None
        self._response = length_schedule(workload.response_tokens, "output") if workload.response_tokens else None
        self._trajectories = TrajectorySampler(workload.multiturn) if workload.multiturn is not None else None
        self._success = workload.success_rate
        self._step_sigma = workload.step_length_sigma
        self._step_scale_seed = step_scale_seed
        self._next_group = 0

    def draw(self, count: int, version: int, samples: int | None = None) -> list[PromptGroup]:
        """`count` groups for policy `version`; `samples`: responses per prompt in place of the budget's (a remedy
        that over-provisions responses, RollPacker's η·R0)."""
        if samples is not None and self._replay is not None:
            raise ValueError("a replayed group has the responses it was recorded with")
        drafts = self._replayed(count) if self._replay is not None else self._sampled(count, version, samples)
        groups = []
        for prompt, responses, truncated, turns, success in drafts:
            informative = self._decide(len(responses), success, self._filter_rng)
            groups.append(PromptGroup(self._next_group, prompt, responses, truncated, turns, informative, success))
            self._next_group += 1
        return groups

    def again(self, group: PromptGroup, samples: int) -> PromptGroup:
        """The same prompt sent out again as a new group, its first `samples` responses as drawn (a prompt's
        difficulty, and so its lengths, stay its own: RollPacker's long round reruns the prompts a short round
        aborted)."""
        turns = None if group.turns is None else group.turns[:samples]
        again = PromptGroup(self._next_group, group.prompt_tokens, group.response_tokens[:samples],
                            group.truncated[:samples], turns, group.informative, group.success_rate)
        self._next_group += 1
        return again

    def _response_cap(self, prompt: int) -> int:
        """Most tokens a response to this prompt may have: max_response_tokens, less where the model length binds."""
        return max(1, min(self._cap, self._model_len - prompt))

    # ------------------------------------------------------------------------------------------- replay

    def _replayed(self, count: int) -> list[tuple]:
        assert self._replay is not None
        cap = self._cap
        drafts = []
        for group in self._replay.take(count):
            if group.trajectories is None:
                own = self._response_cap(group.prompt_tokens)
                drafts.append((group.prompt_tokens, tuple(min(r, own) for r in group.responses),
                               tuple(r >= own for r in group.responses), None, None))
            else:
                drafts.append((group.prompt_tokens, group.responses,
                               tuple(any(t.tokens >= cap for t in tr.turns) for tr in group.trajectories),
                               tuple(tr.turns for tr in group.trajectories), None))
        return drafts

    # ------------------------------------------------------------------------------------------- sampled

    def _allocated(self, count: int, success: np.ndarray | None, samples: int | None) -> np.ndarray:
        """Responses per prompt: the budget's, or `samples` each. The budget draws either way, so the stream of
        lengths that follows does not depend on the override."""
        allocated = self._allocate(count, success, self._rng)
        return allocated if samples is None else np.full(count, samples, dtype=np.int64)

    def _sampled(self, count: int, version: int, samples_each: int | None = None) -> list[tuple]:
        from scipy.special import ndtr

        rng, cap = self._rng, self._cap
        rho, c = self._groups.within_group_correlation, self._groups.prompt_response_correlation
        if rho == 0 and c == 0 and self._joint is None and self._trajectories is None:
            return self._independent(count, version, samples_each)
        difficulty = rng.standard_normal(count)
        if self._joint is not None:
            prompts, response_mean, response_sd = self._joint_prompts(count)
        else:
            scores = c * difficulty + math.sqrt(1 - c * c) * rng.standard_normal(count)
            assert self._prompt is not None
            prompts = self._prompt.at(version).lengths(ndtr(scores), self._max_prompt)
        success = self._success_rates(difficulty)
        samples = self._allocated(count, success, samples_each)
        owners = np.repeat(np.arange(count), samples)
        scores = math.sqrt(rho) * difficulty[owners] + math.sqrt(1 - rho) * rng.standard_normal(len(owners))
        bounds = np.concatenate([[0], np.cumsum(samples)])
        drafts = []
        if self._trajectories is not None:
            trajectories = self._trajectories.draw(rng, prompts[owners], scores, version, cap, self._model_len)
            for i in range(count):
                drafts.append(self._multi_turn_draft(int(prompts[i]), trajectories[bounds[i]:bounds[i + 1]], success, i))
            return drafts
        scale = self._step_scale(version)
        if self._joint is not None:
            drawn = scale * (response_mean[owners] + response_sd[owners] * scores)
            lengths = np.clip(np.rint(drawn), 1, cap + 1).astype(np.int64)
        else:
            assert self._response is not None
            lengths = self._scaled(self._response.at(version).lengths(ndtr(scores), self._unscaled_cap(scale)), scale)
        return self._drafts(prompts, lengths, samples, success)

    def _step_scale(self, version: int) -> float:
        """The factor every sampled response of policy version `version` is multiplied by (1 without a step spread).
        Drawn from its own stream keyed by the version, so it does not depend on the order versions are asked for."""
        if not self._step_sigma:
            return 1.0
        sigma = self._step_sigma
        return float(np.exp(sigma * np.random.default_rng([self._step_scale_seed, version]).standard_normal()
                            - sigma * sigma / 2))

    def _unscaled_cap(self, scale: float) -> int:
        """The length to draw up to so that, scaled, it still reaches one past the cap (a truncated response)."""
        return self._cap + 1 if scale == 1.0 else max(1, math.ceil((self._cap + 1) / scale))

    def _scaled(self, lengths: np.ndarray, scale: float) -> np.ndarray:
        if scale == 1.0:
            return lengths
        return np.clip(np.rint(lengths * scale), 1, self._cap + 1).astype(np.int64)

    def _independent(self, count: int, version: int, samples_each: int | None = None) -> list[tuple]:
        """Uncorrelated lengths need no copula: each drawn by its distribution's own sampler."""
        assert self._prompt is not None and self._response is not None
        prompts = self._prompt.at(version).sample(self._rng, count, self._max_prompt)
        success = self._success_rates(self._rng.standard_normal(count)) if self._success is not None else None
        samples = self._allocated(count, success, samples_each)
        # One past the cap, so that a response reaching it can be told apart: it was truncated there.
        scale = self._step_scale(version)
        lengths = self._scaled(self._response.at(version).sample(self._rng, int(samples.sum()), self._unscaled_cap(scale)),
                               scale)
        return self._drafts(prompts, lengths, samples, success)

    def _drafts(self, prompts, lengths, samples, success) -> list[tuple]:
        """Each prompt's draft: its responses cut at its cap, and which were cut. Compared over the whole batch at once
        (element by element, numpy scalars cost a Python call per comparison: thousands of responses a step)."""
        bounds = np.concatenate([[0], np.cumsum(samples)]).tolist()
        prompt_tokens = [int(prompt) for prompt in prompts]
        caps = np.repeat([self._response_cap(prompt) for prompt in prompt_tokens], samples)
        responses = [int(length) for length in np.minimum(lengths, caps).tolist()]
        truncated = (lengths > caps).tolist()
        drafts = []
        for i, prompt in enumerate(prompt_tokens):
            first, last = bounds[i], bounds[i + 1]
            drafts.append((prompt, tuple(responses[first:last]), tuple(truncated[first:last]), None,
                           None if success is None else float(success[i])))
        return drafts

    def _multi_turn_draft(self, prompt: int, trajectories: list[Trajectory], success, i: int) -> tuple:
        return (prompt, tuple(t.generated for t in trajectories), tuple(t.truncated for t in trajectories),
                tuple(t.turns for t in trajectories), None if success is None else float(success[i]))

    def _success_rates(self, difficulty: np.ndarray) -> np.ndarray | None:
        if self._success is None:
            return None
        from scipy import stats
        from scipy.special import ndtr

        config = self._success
        link = config.length_correlation
        scores = link * difficulty + math.sqrt(1 - link * link) * self._rng.standard_normal(len(difficulty))
        a, b = config.mean * config.concentration, (1 - config.mean) * config.concentration
        return stats.beta(a, b).ppf(ndtr(scores))

    def _joint_prompts(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per prompt: its length, and the mean and spread of its samples' lengths given that prompt length (so that
        each (prompt, sample) pair follows the drawn mixture component's 2-D normal)."""
        assert self._joint is not None
        components = self._joint.components
        weights = np.array([c.weight for c in components])
        cumulative = np.cumsum(weights) / weights.sum()
        chosen = np.minimum(np.searchsorted(cumulative, self._rng.random(count), side="right"), len(components) - 1)
        mean = np.array([c.mean_tokens for c in components])[chosen]
        cov = np.array([c.covariance for c in components])[chosen]
        prompt_sd = np.sqrt(cov[:, 0, 0])
        prompt_raw = mean[:, 0] + prompt_sd * self._rng.standard_normal(count)
        slope = cov[:, 0, 1] / cov[:, 0, 0]
        response_mean = mean[:, 1] + slope * (prompt_raw - mean[:, 0])
        response_sd = np.sqrt(cov[:, 1, 1] - slope * cov[:, 0, 1])
        prompts = np.clip(np.rint(prompt_raw), 1, self._max_prompt).astype(np.int64)
        return prompts, response_mean, response_sd
