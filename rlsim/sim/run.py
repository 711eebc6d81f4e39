"""Run one scenario: build the simulation, drive the RL loop to the last step, freeze the event log."""
from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from simpy.core import EmptySchedule

from rlsim.config.bound import Bound
from rlsim.errors import Problem, ScenarioError
from rlsim.events import EventLog, StepRecord
from rlsim.sim.build import Simulation, build
from rlsim.sim.loop import controller_for
from rlsim.sim.multi_agent import MultiAgentLoop


@dataclass(frozen=True)
class RunOutput:
    log: EventLog
    simulator_wall_s: float  # host seconds the simulation took


# Container allocations, net of frees, between two young-generation collections while a simulation runs.
SIMULATION_GC_THRESHOLD = 50_000


@contextmanager
def _rare_collections() -> Iterator[None]:
    """Collect cyclic garbage less often while the simulation runs, then restore the interpreter's setting.

    A run keeps every span, sample and record it makes, so the heap only grows, and at the default threshold (700)
    the collector keeps re-walking it: a fifth of a production-scale step's host time (benchmarks/bench_step). What
    it frees comes to the same; only when it runs changes.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], SIMULATION_GC_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def simulate_log(bound: Bound, *, mode: Literal["fast", "exact"] = "fast",
                 on_step: Callable[[StepRecord], None] | None = None) -> RunOutput:
    """Simulate the scenario; `on_step` is called with each RL step as it ends (a live per-step table)."""
    with _rare_collections():
        return _simulate_log(bound, mode, on_step)


def _simulate_log(bound: Bound, mode: Literal["fast", "exact"],
                  on_step: Callable[[StepRecord], None] | None) -> RunOutput:
    began = time.perf_counter()
    sim: Simulation | None = None
    if bound.scenario.agents is None:
        sim = build(bound, mode=mode)
        env, recorder, loop, engines = sim.env, sim.recorder, controller_for(sim).run(), sim.rollout_engines
    else:
        agents = MultiAgentLoop(bound, mode=mode)
        assert agents.recorder is not None
        env, recorder, loop, engines = agents.env, agents.recorder, agents.run(), agents.rollout_engines
    recorder.on_step = on_step
    done = env.process(loop)
    events = 0
    # Stepping by hand (rather than env.run) counts the events: the simulator's work, which must scale with sequences.
    # Until the loop's end is *processed*: a loop that fails is triggered at once, and only processing re-raises.
    # An empty schedule is found by the step that finds nothing to pop, rather than by a peek before every step.
    while not done.processed:
        try:
            env.step()
        except EmptySchedule:
            if sim is not None:
                _refuse_a_deadlocked_pool(sim, env.now)
            raise RuntimeError(f"the simulation of {bound.scenario.name!r} stalled at t={env.now:.3f} s with steps "
                               "left: a process waits for an event nothing will trigger (a bug in rlsim)") from None
        events += 1
    for engine in engines:
        engine.close()
    log = recorder.freeze(env.now, events)
    return RunOutput(log, time.perf_counter() - began)


def _refuse_a_deadlocked_pool(sim: Simulation, now: float) -> None:
    """A run stuck because trajectories hold every sandbox while waiting for engines that wait for the trainer, which
    waits for the trajectories that wait for a sandbox, is the scenario's (a real cluster would hang too): say so."""
    stuck = sim.engines[0].environment.deadlock() if sim.engines else None
    if stuck is not None:
        raise ScenarioError(Problem(
            f"the environment pool deadlocked at t={now:.3f} s: {stuck}", path="workload.environments",
            valid="more sandboxes than trajectories in flight at once (prompts × samples, more with an off-policy "
            "schedule), or scope: call"))

