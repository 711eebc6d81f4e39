"""What one average step of a workload looks like, for napkin math (`rlsim estimate`) and `rlsim workload show`:
the distributions of prompt lengths and of tokens generated per sample over the run's steps, and the means of the
parts no single length captures (tool tokens and tool waits of multi-turn trajectories, samples per prompt, the share
of groups dynamic sampling keeps).

Parametric workloads are answered exactly; replayed traces from their recorded groups; sampled multi-turn and
joint workloads from a fixed-seed draw of groups through the simulator's own sampler (`MONTE_CARLO_GROUPS`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.config.schema import Scenario
from rlsim.workload.filters import expected_kept_fraction
from rlsim.workload.lengths import FiniteLengths, LengthDistribution, length_schedule
from rlsim.workload.replay import recorded_groups

MONTE_CARLO_GROUPS = 2048


@dataclass(frozen=True)
class Marginals:
    prompt: LengthDistribution  # prompt tokens of a sample
    response: LengthDistribution  # tokens a sample generates (all its turns), before the cap
    appended_tokens: float  # mean tool-response tokens a sample's context grows by
    tool_seconds: float  # mean seconds a sample waits for its tools
    samples_per_prompt: float  # mean
    kept_fraction: float  # share of groups dynamic sampling keeps (of the drawn groups, when groups are drawn)


def workload_marginals(scenario: Scenario, steps: int) -> Marginals:
    """The marginals of `steps` steps of the scenario's workload."""
    workload, algo = scenario.workload, scenario.algorithm
    kept = expected_kept_fraction(workload, algo.samples_per_prompt)
    if workload.replay is not None:
        groups = recorded_groups(Path(workload.replay.path))
        prompts = [g.prompt_tokens for g in groups for _ in g.responses]
        responses = [r for g in groups for r in g.responses]
        trajectories = [t for g in groups for t in (g.trajectories or ())]
        appended = float(np.mean([t.appended for t in trajectories])) if trajectories else 0.0
        tools = float(np.mean([sum(u.tool_s for u in t.turns) for t in trajectories])) if trajectories else 0.0
        return Marginals(FiniteLengths.of("replay", prompts), FiniteLengths.of("replay", responses), appended, tools,
                         len(responses) / len(groups), kept)
    samples = _mean_samples(scenario)
    # A step length spread makes the marginal a mixture over the run's steps: drawn, as the simulator draws it.
    if workload.multiturn is None and workload.joint_tokens is None and not workload.step_length_sigma:
        assert workload.prompt_tokens is not None and workload.response_tokens is not None
        return Marginals(length_schedule(workload.prompt_tokens, "input").over_steps(steps),
                         length_schedule(workload.response_tokens, "output").over_steps(steps), 0.0, 0.0, samples, kept)
    return _drawn(scenario, steps, samples, kept)


def _mean_samples(scenario: Scenario) -> float:
    budget, n = scenario.workload.samples_per_prompt, scenario.algorithm.samples_per_prompt
    if budget.kind == "categorical":
        values = np.asarray(budget.samples.values, float)
        weights = np.ones(len(values)) if budget.samples.weights is None else np.asarray(budget.samples.weights)
        return float(np.dot(values, weights) / weights.sum())
    return float(n)  # uniform, and knapsack (which splits the same total differently)


def _drawn(scenario: Scenario, steps: int, samples: float, kept: float) -> Marginals:
    """Prompt and response lengths of groups drawn by the simulator's sampler, spread evenly over the run's steps.
    Single-turn responses are drawn without the cap (so the estimate's clipping sees the truncated share); the turns
    of a trajectory obey the engine's limits as they do in a run."""
    from rlsim.workload.batches import GroupSampler

    algorithm = scenario.algorithm
    if scenario.workload.multiturn is None:
        algorithm = algorithm.model_copy(update={"max_response_tokens": 1 << 30})
    sampler = GroupSampler(scenario.workload, algorithm, np.random.default_rng(scenario.seed),
                           np.random.default_rng(scenario.seed + 1))
    per_step = max(1, MONTE_CARLO_GROUPS // steps)
    groups = [g for step in range(steps) for g in sampler.draw(per_step, step)]
    prompts = [g.prompt_tokens for g in groups for _ in g.response_tokens]
    responses = [r for g in groups for r in g.response_tokens]
    turns = [t for g in groups for t in (g.turns or ())]
    # A budget that gives samples where groups are likely to disagree (knapsack) keeps more than the filter's
    # expectation at the nominal samples per prompt: the drawn groups say how many.
    kept = float(np.mean([g.informative for g in groups]))
    appended = float(np.mean([sum(u.tool_tokens for u in t) for t in turns])) if turns else 0.0
    tools = float(np.mean([sum(u.tool_s for u in t) for t in turns])) if turns else 0.0
    return Marginals(FiniteLengths.of("drawn", prompts), FiniteLengths.of("drawn", responses), appended, tools,
                     samples, kept)
