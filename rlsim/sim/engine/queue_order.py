"""The order in which an engine serves its waiting queue (`placement.rollout.scheduling_policy`), as policies
registered under their YAML names.

vLLM V1 and SGLang serve their queue first come, first served (`fcfs`): new requests at the back, a preempted one
back at the front. A length-predicted priority orders it by each waiting rollout's predicted *remaining* tokens
instead, re-predicted whenever the rollout joins the queue — from the tokens it generated so far when it comes back
preempted, interrupted or from its tool calls — as a token-level length predictor does: the Length Value Model
(LenVM; Zhang et al., arXiv 2604.27039) and Trail (Shahout et al., arXiv 2410.01035) re-predict the remaining length
at every generated token from the model's own hidden state. A rollout's rank is fixed while it waits (it generates
nothing then), so the queue is kept sorted as rollouts join it; the head blocks the rest, as vLLM's priority policy
stops at the first request it cannot schedule.

rlsim's predictor is the one length-aware balancing uses: a rollout of true length L gets one lognormal factor
exp(σ·N(0,1)) (σ = `schedule.length_predictor_noise`), drawn when it is dispatched. A re-prediction after g tokens is
(L − g) times that factor: its relative error stays the rollout's, its absolute error shrinks as it nears its end.
That the error of successive re-predictions is one draw (perfectly correlated) is rlsim's assumption; LenVM reports
its accuracy, not how its errors correlate along a response.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlsim import registry
from rlsim.registry import Registry
from rlsim.sim.sequence import Rollout

Rank = Callable[[float], float]
"""A waiting rollout's rank from its predicted remaining tokens; the lowest is served first (equals: first come)."""


@dataclass(frozen=True)
class QueueOrder:
    """A registered order: `rank`, or None for first come, first served (a preempted rollout back at the front)."""

    name: str
    rank: Rank | None


QUEUE_ORDERS: Registry[QueueOrder] = registry.QUEUE_ORDERS


def register_queue_order(name: str) -> Callable[[Rank], Rank]:
    """Decorator: `rank` orders the queue that `placement.rollout.scheduling_policy: <name>` selects."""
    def decorate(rank: Rank) -> Rank:
        QUEUE_ORDERS.register(name)(QueueOrder(name, rank))
        return rank
    return decorate


QUEUE_ORDERS.register("fcfs")(QueueOrder("fcfs", None))


@register_queue_order("longest_predicted_first")
def longest_predicted_first(remaining: float) -> float:
    """The longest predicted remaining first. A synchronous RL step waits for its last response, so what counts is
    the makespan, and serving the longest jobs first is the rule that bounds it (Graham's LPT rule, SIAM J. Appl.
    Math. 1969: within 4/3 of the optimum on identical machines): the long responses start early instead of
    becoming the step's tail."""
    return -remaining


@register_queue_order("shortest_predicted_first")
def shortest_predicted_first(remaining: float) -> float:
    """The shortest predicted remaining first: the serving systems' choice, which minimises the mean latency
    (shortest-job-first; Fu et al., "Efficient LLM Scheduling by Learning to Rank", NeurIPS 2024: 2.8× lower
    latency than FCFS in chatbot serving), at the cost of the longest responses, which it starts last."""
    return remaining


def repredicted_remaining(rollout: Rollout, predicted: float) -> float:
    """The rollout's remaining tokens as predicted now: its true remaining times the factor its length was predicted
    with (`predicted` over its target)."""
    target = rollout.target_tokens
    return (target - rollout.generated) * (predicted / target)


def uses_predictions(order: str) -> bool:
    """Whether engines serving their queue in this order need every rollout's predicted length."""
    return QUEUE_ORDERS[order].rank is not None
