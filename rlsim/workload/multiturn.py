"""Multi-turn agentic trajectories (Search-R1-like): turns of generation separated by tool calls whose responses are
appended to the context.

A trajectory is a tuple of `Turn`s: what the turn generates, then how long each of its tool calls takes (they run
concurrently, so the turn waits for the slowest) and how many tokens their responses append (none for the final,
answering turn). Generation obeys the engine's limits as verl's
multi-turn rollout does: a turn generates at most max_response_tokens (its max_new_tokens), and the context never
exceeds max_prompt_tokens + max_response_tokens (the model length); a trajectory that reaches it stops there,
truncated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlsim.config.workload import Categorical, MultiTurn
from rlsim.workload.lengths import LengthSchedule, length_schedule


@dataclass(frozen=True)
class Turn:
    tokens: int  # tokens generated in this turn
    call_s: tuple[float, ...] = ()  # seconds each of its tool calls takes; none for the final turn
    tool_tokens: int = 0  # tokens the tool responses append to the context

    @property
    def tool_s(self) -> float:
        """Seconds until the turn's tool calls have all returned (they run concurrently)."""
        return max(self.call_s, default=0.0)


@dataclass(frozen=True)
class Trajectory:
    turns: tuple[Turn, ...]
    truncated: bool

    @property
    def generated(self) -> int:
        return sum(t.tokens for t in self.turns)

    @property
    def appended(self) -> int:
        return sum(t.tool_tokens for t in self.turns)


def cap_trajectory(prompt: int, turns: list[Turn], max_new_tokens: int, model_len: int) -> Trajectory:
    """Apply the engine's limits to drawn turns (see the module docstring)."""
    context = prompt
    kept: list[Turn] = []
    truncated = False
    for i, turn in enumerate(turns):
        room = model_len - context
        tokens = min(turn.tokens, max_new_tokens, room)
        last = i == len(turns) - 1
        if tokens < turn.tokens:
            kept.append(Turn(tokens))
            truncated = True
            break
        context += tokens
        if last or context + turn.tool_tokens >= model_len:
            # No room to generate after the tool responses: the trajectory ends with this turn.
            kept.append(Turn(tokens))
            truncated = not last
            break
        kept.append(turn)
        context += turn.tool_tokens
    return Trajectory(tuple(kept), truncated)


class Counts:
    """Counts from a Categorical, drawn or at given scores."""

    def __init__(self, config: Categorical):
        values = np.asarray(config.values, dtype=np.int64)
        weights = np.ones(len(values)) if config.weights is None else np.asarray(config.weights, float)
        order = np.argsort(values, kind="stable")  # ascending, so that a higher score never gives fewer
        self.values = values[order]
        self.cumulative = np.cumsum(weights[order]) / weights.sum()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.at(rng.random(n))

    def at(self, u: np.ndarray) -> np.ndarray:
        """The counts at uniform scores u (the histogram's quantile function)."""
        index = np.searchsorted(self.cumulative, np.asarray(u, dtype=float), side="right")
        return self.values[np.minimum(index, len(self.values) - 1)]

    @property
    def mean(self) -> float:
        return float(np.dot(np.diff(np.concatenate([[0.0], self.cumulative])), self.values))


class TrajectorySampler:
    """Draws trajectories from a `MultiTurn` model. A trajectory's number of turns is the turns histogram's quantile
    at its sample's normal score in the GRPO copula (so a group's trajectories share a tendency to search more); its
    turn and tool-response lengths share a per-trajectory factor v: each one's score is √ρ·v + √(1 − ρ)·ε, ρ the
    within-trajectory correlation. A turn limit in force at the version (`max_turns`) cuts the count, the last allowed
    turn ending the trajectory, truncated."""

    def __init__(self, config: MultiTurn):
        from rlsim.workload.latency import latency_distribution

        self.turns = Counts(config.turns)
        self.calls = Counts(config.calls_per_turn)
        self.tool_turn: LengthSchedule = length_schedule(config.tool_turn_tokens)
        self.answer_turn: LengthSchedule = length_schedule(config.answer_turn_tokens)
        self.tool_tokens: LengthSchedule = length_schedule(config.tool_response_tokens)
        self.latency = latency_distribution(config.tool_latency)
        self.rho = config.within_trajectory_correlation
        self.turn_limit = config.turn_limit

    def draw(self, rng: np.random.Generator, prompts: np.ndarray, scores: np.ndarray, version: int,
             max_new_tokens: int, model_len: int) -> list[Trajectory]:
        """One trajectory per (prompt length, normal score) pair; all drawn at once, so quantile searches batch."""
        from scipy.special import ndtr

        wanted = self.turns.at(ndtr(scores))
        limit = self.turn_limit(version)
        turns = wanted if limit is None else np.minimum(wanted, limit)
        tool_turns = int(turns.sum() - len(turns))
        # A turn's calls: drawn only when some turn makes several, so one-call workloads keep their random streams.
        per_turn = (self.calls.draw(rng, tool_turns) if self.calls.values[-1] > 1
                    else np.ones(tool_turns, dtype=np.int64))
        calls = int(per_turn.sum())
        shared, own = math.sqrt(self.rho), math.sqrt(1 - self.rho)
        factor = rng.standard_normal(len(scores))
        owners = np.repeat(factor, turns - 1)
        tool_turn = self.tool_turn.at(version).lengths(
            ndtr(shared * owners + own * rng.standard_normal(tool_turns)), max_new_tokens + 1)
        responses = self.tool_tokens.at(version).lengths(
            ndtr(shared * np.repeat(owners, per_turn) + own * rng.standard_normal(calls)), model_len)
        latency = self.latency.ppf(rng.random(calls)) if calls else np.zeros(0)
        answer = self.answer_turn.at(version).lengths(
            ndtr(shared * factor + own * rng.standard_normal(len(scores))), max_new_tokens + 1)
        first_call = np.concatenate([[0], np.cumsum(per_turn)])
        appended = np.add.reduceat(responses, first_call[:-1]) if calls else np.zeros(0, dtype=np.int64)
        out = []
        start = 0
        for k, count in enumerate(turns):
            end = start + count - 1
            drawn = [Turn(int(tool_turn[j]), tuple(float(x) for x in latency[first_call[j]:first_call[j + 1]]),
                          int(appended[j])) for j in range(start, end)]
            drawn.append(Turn(int(answer[k])))
            trajectory = cap_trajectory(int(prompts[k]), drawn, max_new_tokens, model_len)
            if count < wanted[k] and not trajectory.truncated:
                trajectory = Trajectory(trajectory.turns, truncated=True)  # cut short by the turn limit
            out.append(trajectory)
            start = end
        return out
