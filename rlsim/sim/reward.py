"""The reward stage on CPUs: rule-based checks on a worker pool, or sandbox executions with a latency distribution and
a cap on concurrent runs. (A reward model on GPUs is a forward pass; the RL loop runs it on the trainer machinery.)"""
from __future__ import annotations

import heapq
from collections.abc import Generator, Sequence

import numpy as np
import simpy

from rlsim.config.workload import RuleReward, SandboxReward


class RewardPool:
    """Scores samples; `score(n)` is a process that ends when all n are scored, FIFO on `slots` parallel workers."""

    def __init__(self, env: simpy.Environment, reward: RuleReward | SandboxReward, rng: np.random.Generator):
        self.env = env
        self.reward = reward
        self.rng = rng
        self.slots = reward.workers if reward.kind == "rule" else reward.concurrency
        # When each worker is free again (a heap): scoring is deterministic given the rng, so no SimPy resource is needed.
        self._free_at = [0.0] * self.slots

    def service_times(self, n: int) -> np.ndarray:
        if self.reward.kind == "rule":
            return np.full(n, self.reward.cpu_seconds_per_sample)
        return self.reward.median_latency_s * np.exp(self.reward.latency_sigma * self.rng.standard_normal(n))

    def completion_times(self, arrivals: Sequence[float]) -> list[float]:
        """When each sample (arriving at the given times, in order) is scored: the earliest free worker takes it."""
        done = []
        for arrival, service in zip(arrivals, self.service_times(len(arrivals)), strict=True):
            start = max(arrival, heapq.heappop(self._free_at))
            heapq.heappush(self._free_at, start + float(service))
            done.append(start + float(service))
        return done

    def score_batch(self, n: int) -> Generator:
        """Score n samples that are all ready now; the process ends when the last is scored."""
        finish = max(self.completion_times([self.env.now] * n), default=self.env.now)
        yield self.env.timeout(finish - self.env.now)
