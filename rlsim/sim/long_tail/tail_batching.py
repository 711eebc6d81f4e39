"""tail_batching: RollPacker's tail batching (Gao et al., arXiv 2509.21009, §3).

A *short round* launches η·P0 prompts with ⌈η·R0⌉ responses each (P0 = algorithm.prompts_per_step, R0 =
algorithm.samples_per_prompt) and stops once P0 prompts have R0 finished responses each: those train, the rest are
aborted. The prompts it aborted — the ones slowest to finish, mostly those with long responses — wait in a long-prompt
queue; once it holds P0 prompts, a *long round* runs exactly them, R0 responses each, without speculation. Most steps
are short and balanced; the long tail is batched into few steps, and every prompt still trains on-policy.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlsim.config.long_tail import Fail, LongTailKind, LongTailParams, refuse_unless
from rlsim.sim.long_tail import register_remedy

if TYPE_CHECKING:
    from rlsim.config.schema import Scenario
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward

# What the sequence records name as the policy that dropped a rollout it aborted.
TAIL_BATCHING = "tail_batching"


class TailBatching(LongTailParams):
    """RollPacker's tail batching, its one parameter as the paper names it."""

    kind: Literal["tail_batching"] = Field(description="tail_batching: RollPacker's short and long rounds")
    eta: float = Field(
        gt=1.0, le=4.0, allow_inf_nan=False,
        description="η, the speculation factor of a short round: η·P0 prompts launched with ⌈η·R0⌉ responses each, "
        "the first P0 prompts with R0 finished responses kept. RollPacker's released configuration runs 1.25 "
        "(max_prompts_ratio 1.25, max_num_return_sequences 5 for num_return_sequences_in_group 4)")


def short_round_prompts(eta: float, prompts: int) -> int:
    """η·P0 prompts, at least one more than P0 (else nothing could be deferred)."""
    return max(prompts + 1, round(eta * prompts))


def short_round_samples(eta: float, samples: int) -> int:
    """⌈η·R0⌉ responses a prompt."""
    return math.ceil(eta * samples - 1e-9)


def _controller(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.remedies.tail_batching import TailBatchingController

    return TailBatchingController(sim, reward, sampling)


def _launched_per_response(scenario: Scenario) -> float:
    params = scenario.schedule.long_tail
    assert isinstance(params, TailBatching)
    algo = scenario.algorithm
    short = (short_round_prompts(params.eta, algo.prompts_per_step)
             * short_round_samples(params.eta, algo.samples_per_prompt))
    return short / algo.samples_per_step + params.eta - 1  # and the aborted prompts, rerun in long rounds


def _check(scenario: Scenario, fail: Fail) -> None:
    workload = scenario.workload
    refuse_unless(workload.samples_per_prompt.kind == "uniform", fail, ("workload", "samples_per_prompt", "kind"),
                  "tail batching over-provisions R0 responses a prompt to ⌈η·R0⌉; it needs the same R0 for "
                  "every prompt", value=workload.samples_per_prompt.kind, valid="uniform")
    refuse_unless(workload.replay is None, fail, ("workload", "replay"), "tail batching draws more responses than "
                  "a replayed group recorded", value=workload.replay and workload.replay.path,
                  valid="null (a sampled workload)")
    refuse_unless(not scenario.algorithm.dynamic_sampling, fail, ("algorithm", "dynamic_sampling"),
                  "tail batching fixes each round's prompts (RollPacker runs without dynamic sampling)", value=True,
                  valid="false")


register_remedy("tail_batching")(LongTailKind(
    TailBatching, _controller, _launched_per_response, carries_over=False, check=_check))
