"""Prompt groups for each RL step: a prompt length and the response lengths of its samples.

Lengths come from the scenario's length models (`workload.lengths`). Responses are clipped at max_response_tokens
and marked truncated when they hit it. Randomness comes only from the Generator passed in, so a seed fixes the batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsim.config.schema import Scenario
from rlsim.workload.lengths import length_distribution


@dataclass(frozen=True)
class PromptGroup:
    group: int
    prompt_tokens: int
    response_tokens: tuple[int, ...]
    truncated: tuple[bool, ...]


class GroupSampler:
    """Draws prompt groups in order; group ids count up across steps."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator):
        self._algorithm = scenario.algorithm
        self._prompt = length_distribution(scenario.workload.prompt_tokens, "input")
        self._response = length_distribution(scenario.workload.response_tokens, "output")
        self._rng = rng
        self._next_group = 0

    def draw(self, count: int) -> list[PromptGroup]:
        algo = self._algorithm
        n = algo.samples_per_prompt
        cap = algo.max_response_tokens
        prompts = self._prompt.sample(self._rng, count, algo.max_prompt_tokens)
        # Sample one past the cap so that a response reaching it can be told apart: it was truncated there.
        responses = self._response.sample(self._rng, count * n, cap + 1).reshape(count, n)
        groups = []
        for prompt, row in zip(prompts, responses, strict=True):
            groups.append(PromptGroup(self._next_group, int(prompt), tuple(int(min(r, cap)) for r in row),
                                      tuple(bool(r > cap) for r in row)))
            self._next_group += 1
        return groups
