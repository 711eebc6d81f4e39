"""segment_rollout: UloRL's segment rollout (Du et al., arXiv 2507.19766, §2.1).

An ultra-long response is decoded a segment at a time: each decode round generates at most
max_response_tokens / `segments` tokens of every response in flight. A response that ends within its segment joins
the experience pool; one that does not is carried into the next round, continued from where it stopped (its context
recomputed, as the weights may have changed). Each round's batch is the carried responses plus new prompts, so that
`prompts_per_step` groups are always generating; a step trains the first `prompts_per_step` groups of the pool to
complete, after as many rounds as it takes to gather them. No round waits for more than one segment of the longest
response.
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


class SegmentRollout(LongTailParams):
    """UloRL's segment rollout, its parameter as the paper names it."""

    kind: Literal["segment_rollout"] = Field(description="segment_rollout: UloRL's decoding a segment per round")
    segments: int = Field(
        ge=2, le=64, strict=True,
        description="segments a response of max_response_tokens is cut into; each round decodes one (UloRL: 4 "
        "segments of a 128k cap, 2.06x the training speed of 1 segment on Qwen3-30B-A3B)")


def segment_tokens(params: SegmentRollout, max_response_tokens: int) -> int:
    """The per-round decode budget of a response: its share of the cap."""
    return math.ceil(max_response_tokens / params.segments)


def _controller(sim: Simulation, reward: Reward, sampling: Sampling) -> Controller:
    from rlsim.sim.remedies.segment_rollout import SegmentRolloutController

    return SegmentRolloutController(sim, reward, sampling)


def _launched_per_response(scenario: Scenario) -> float:
    return 1.0  # every response launched trains, once its segments are done


def _check(scenario: Scenario, fail: Fail) -> None:
    params = scenario.schedule.long_tail
    assert isinstance(params, SegmentRollout)
    cap = scenario.algorithm.max_response_tokens
    refuse_unless(params.segments <= cap, fail, ("schedule", "long_tail", "segments"),
                  f"a response of max_response_tokens ({cap}) cannot be cut into more segments than tokens",
                  value=params.segments, valid=f"2 to {min(cap, 64)}")


register_remedy("segment_rollout")(LongTailKind(
    SegmentRollout, _controller, _launched_per_response, carries_over=True, check=_check))
