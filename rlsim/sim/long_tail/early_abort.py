"""early_abort: DUET's marker-gated abort (Hu et al., arXiv 2605.08441, §3).

A rollout whose answer marker (a boxed answer in math, a closing code fence in code) has not appeared by the abort
horizon plus a grace window is aborted there, except with a small keep probability, when it runs on to its end and
its gradient is importance-weighted by the inverse of that probability; aborted rollouts are left out of the loss.
rlsim's responses end with their answer, so a response longer than the horizon plus the grace window is one whose
marker has not appeared there: it is cut at that length and does not train (recorded as dropped by `early_abort`),
or, with `abort_keep_probability`, it generates in full and trains. DUET's other half, how many rollouts each prompt
gets, is a per-prompt budget (`workload.samples_per_prompt`, e.g. knapsack).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlsim.config.long_tail import Fail, LongTailKind, LongTailParams, refuse_unless
from rlsim.fields import NonNegativeInt, PositiveInt, Probability
from rlsim.sim.long_tail import register_remedy

if TYPE_CHECKING:
    from rlsim.config.schema import Scenario
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward

# What the sequence records name as the policy that dropped an aborted rollout.
EARLY_ABORT = "early_abort"


class EarlyAbort(LongTailParams):
    """DUET's marker-gated abort, its parameters as the paper names them."""

    kind: Literal["early_abort"] = Field(description="early_abort: DUET's marker-gated abort at a length budget")
    abort_horizon_tokens: PositiveInt = Field(
        description="the abort horizon: response tokens after which a rollout with no answer marker yet may be "
        "aborted (after the grace window)")
    grace_window_tokens: NonNegativeInt = Field(
        0, description="tokens past the horizon a rollout may still produce its marker before it is aborted")
    abort_keep_probability: Probability = Field(
        0.05, description="the chance a marker-less rollout is kept and run to its end, importance-weighted by the "
        "inverse; DUET's default 0.05 (its sensitivity study: 0.01 to 0.20)")

    @property
    def cut_tokens(self) -> int:
        """Where a marker-less rollout is aborted."""
        return self.abort_horizon_tokens + self.grace_window_tokens


def _controller(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.remedies.early_abort import EarlyAbortController

    return EarlyAbortController(sim, reward, sampling)


def _launched_per_response(scenario: Scenario) -> float:
    return 1.0


def _check(scenario: Scenario, fail: Fail) -> None:
    params = scenario.schedule.long_tail
    assert isinstance(params, EarlyAbort)
    cap = scenario.algorithm.max_response_tokens
    refuse_unless(params.cut_tokens < cap, fail, ("schedule", "long_tail", "abort_horizon_tokens"),
                  f"the horizon plus the grace window ({params.cut_tokens}) must fall before max_response_tokens "
                  f"({cap}), or nothing is ever aborted", value=params.abort_horizon_tokens,
                  valid=f"1 to {cap - 1 - params.grace_window_tokens}")
    refuse_unless(not scenario.algorithm.dynamic_sampling, fail, ("algorithm", "dynamic_sampling"),
                  "DUET is a layer over GRPO, which keeps every group it generates", value=True, valid="false")


register_remedy("early_abort")(LongTailKind(
    EarlyAbort, _controller, _launched_per_response, carries_over=False, check=_check))
