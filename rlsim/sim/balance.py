"""Load balancing: which rollout engine generates each rollout, as policies registered under their YAML names.

A policy is one decorated function choosing the engine for a unit of work: a whole GRPO group when groups are kept
together (its samples then share the prompt's KV cache), a single rollout when they are spread. It sees the engines
(their load counts the iterations completed so far, in fast and exact mode alike) and the `Dispatcher` (round-robin
cursor, `least`). A policy may also move queued work between engines (`steal`): the dispatcher calls it when an
engine's queue runs empty, and the controller may call `Dispatcher.rebalance` at any time.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rlsim import registry
from rlsim.config.schema import RolloutPlacement, Schedule
from rlsim.registry import Registry
from rlsim.sim.engine.queue_order import uses_predictions
from rlsim.sim.sequence import Rollout

if TYPE_CHECKING:  # names of policies are read when a scenario is loaded, which must not start the simulator
    from rlsim.sim.engines import GenerationEngine

Choose = Callable[[Sequence[Rollout], Sequence["GenerationEngine"], "Dispatcher"], int]
Steal = Callable[["GenerationEngine", Sequence["GenerationEngine"]], int]
Measure = Callable[["GenerationEngine"], float]


@dataclass(frozen=True)
class Balancer:
    """A registered policy: `choose` picks an engine index for a unit of work; `predicts`: it needs predicted lengths
    (and units are dispatched longest predicted first); `steal` moves queued rollouts to an engine with spare room
    and returns how many it moved."""

    name: str
    choose: Choose
    predicts: bool = False
    steal: Steal | None = None


BALANCERS: Registry[Balancer] = registry.LOAD_BALANCERS


def register_balancer(name: str, *, predicts: bool = False, steal: Steal | None = None) -> Callable[[Choose], Choose]:
    """Decorator: `choose` becomes the load balancer `schedule.load_balancer: <name>` selects."""
    def decorate(choose: Choose) -> Choose:
        BALANCERS.register(name)(Balancer(name, choose, predicts, steal))
        return choose
    return decorate


@register_balancer("round_robin")
def round_robin(unit: Sequence[Rollout], engines: Sequence[GenerationEngine], dispatcher: Dispatcher) -> int:
    """Engines in turn, whatever their load (verl's default)."""
    choice = dispatcher.cursor % len(engines)
    dispatcher.cursor += 1
    return choice


@register_balancer("least_requests")
def least_requests(unit: Sequence[Rollout], engines: Sequence[GenerationEngine], dispatcher: Dispatcher) -> int:
    """The engine with the fewest outstanding rollouts (waiting or running)."""
    return dispatcher.least(_requests)


@register_balancer("least_kv")
def least_kv(unit: Sequence[Rollout], engines: Sequence[GenerationEngine], dispatcher: Dispatcher) -> int:
    """The engine with the least KV cache in use plus the context its queue will bring (SGLang-router-like)."""
    return dispatcher.least(_kv_load)


@register_balancer("length_aware", predicts=True)
def length_aware(unit: Sequence[Rollout], engines: Sequence[GenerationEngine], dispatcher: Dispatcher) -> int:
    """The engine with the least predicted work left. With units dispatched longest predicted first, this is the
    longest-processing-time-first rule over predicted lengths (StreamRL's, and Length Value Model-style ranking)."""
    return dispatcher.least(_predicted_work)


def _requests(engine: GenerationEngine) -> float:
    return engine.outstanding


def _kv_load(engine: GenerationEngine) -> float:
    return engine.kv_used_tokens + engine.queued_tokens


def _predicted_work(engine: GenerationEngine) -> float:
    return engine.predicted_work


def steal_from_most_queued(thief: GenerationEngine, engines: Sequence[GenerationEngine]) -> int:
    """Move rollouts that have not started from the back of the longest queue to `thief`: half that queue (at least
    one), no more than the thief has free sequence slots. Only an engine with nothing queued steals."""
    if thief.queued:
        return 0
    victim = max(engines, key=lambda engine: engine.queued)
    room = thief.max_num_seqs - thief.running
    if victim is thief or not victim.queued or room <= 0:
        return 0
    taken = victim.steal(min(room, max(1, victim.queued // 2)))
    for rollout, predicted in taken:
        thief.submit(rollout, predicted)
    return len(taken)


@register_balancer("work_stealing", steal=steal_from_most_queued)
def work_stealing(unit: Sequence[Rollout], engines: Sequence[GenerationEngine], dispatcher: Dispatcher) -> int:
    """Round-robin placement; engines whose queue runs empty then steal queued rollouts from the most loaded one."""
    return round_robin(unit, engines, dispatcher)


def engines_predict(rollout: RolloutPlacement) -> bool:
    """Whether the generation engines admit or order their queue by predicted length, so every rollout is predicted
    whatever the balancer."""
    return rollout.admission == "past_future" or uses_predictions(rollout.scheduling_policy)


class Dispatcher:
    """Sends rollouts to engines under the scenario's balancing policy, group placement and length predictor.

    `rng` draws the length predictor's errors: a rollout of true length L is predicted at L·exp(σ·N(0,1)), σ the
    schedule's `length_predictor_noise`.
    """

    def __init__(self, schedule: Schedule, engines: Sequence[GenerationEngine], rng: np.random.Generator,
                 engines_predict: bool = False):
        if not engines:
            raise ValueError("a dispatcher needs at least one engine")
        self.balancer = BALANCERS[schedule.load_balancer]
        self.engines = list(engines)
        self.rng = rng
        self.together = schedule.group_placement == "together"
        self.noise = schedule.length_predictor_noise
        # The engines admit or order their queue by predicted length: every rollout is predicted.
        self.predicts = self.balancer.predicts or engines_predict
        self.cursor = 0  # round-robin position
        self._loads: dict[Measure, list[float]] = {}  # per engine, within one dispatch call (see `least`)
        self._heaps: dict[Measure, list[tuple[float, int]]] = {}  # (load, engine index), stale entries skipped
        if self.balancer.steal is not None:
            for engine in self.engines:
                engine.on_queue_empty = self._steal_for

    def dispatch(self, rollouts: Iterable[Rollout]) -> None:
        """Submit each rollout to the engine the policy chooses for it (or for its group)."""
        rollouts = list(rollouts)
        if self.together:
            groups: dict[int, list[Rollout]] = {}
            for rollout in rollouts:
                groups.setdefault(rollout.group, []).append(rollout)
            units = list(groups.values())
        else:
            units = [[rollout] for rollout in rollouts]
        predicted: dict[Rollout, float] = {}
        if self.predicts:
            errors = np.exp(self.noise * self.rng.standard_normal(len(rollouts)))
            predicted = {rollout: rollout.target_tokens * float(error)
                         for rollout, error in zip(rollouts, errors, strict=True)}
        if self.balancer.predicts:
            # Longest predicted first (a stable sort keeps the submission order among equals).
            units.sort(key=lambda unit: -sum(predicted[rollout] for rollout in unit))
        choose, engines = self.balancer.choose, self.engines
        self._loads.clear()
        self._heaps.clear()
        for unit in units:
            index = choose(unit, engines, self)
            engine = engines[index]
            for rollout in unit:
                engine.submit(rollout, predicted.get(rollout))
            for measure, loads in self._loads.items():
                loads[index] = measure(engine)
                heapq.heappush(self._heaps[measure], (loads[index], index))
        self._loads.clear()
        self._heaps.clear()

    def least(self, measure: Measure) -> int:
        """Index of the engine with the smallest `measure` (ties: the lowest index). Simulated time stands still
        during a dispatch, so only the engines it submits to change: the measures are taken once per call and
        refreshed for those alone."""
        loads = self._loads.get(measure)
        if loads is None:
            loads = self._loads[measure] = [measure(engine) for engine in self.engines]
            heap = self._heaps[measure] = [(load, index) for index, load in enumerate(loads)]
            heapq.heapify(heap)
        # A heap of (load, index) answers in O(log engines) per rollout: tens of engines take hundreds of thousands
        # of rollouts in a long asynchronous run. An entry is stale once its engine's load has moved on.
        heap = self._heaps[measure]
        while heap[0][0] != loads[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][1]

    def rebalance(self) -> int:
        """Let every engine with an empty queue steal work, when the policy steals. Rollouts moved."""
        if self.balancer.steal is None:
            return 0
        return sum(self.balancer.steal(engine, self.engines) for engine in self.engines)

    def _steal_for(self, engine: GenerationEngine) -> None:
        assert self.balancer.steal is not None
        self.balancer.steal(engine, self.engines)
