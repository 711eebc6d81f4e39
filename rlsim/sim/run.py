"""Run one scenario: build the simulation, drive the RL loop to the last step, freeze the event log."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from rlsim.config.bound import Bound
from rlsim.events import EventLog
from rlsim.sim.build import build
from rlsim.sim.loop import RLLoop


@dataclass(frozen=True)
class RunOutput:
    log: EventLog
    simulator_wall_s: float  # host seconds the simulation took


def simulate_log(bound: Bound, *, mode: Literal["fast", "exact"] = "fast") -> RunOutput:
    began = time.perf_counter()
    sim = build(bound, mode=mode)
    loop = RLLoop(sim)
    done = sim.env.process(loop.run())
    events = 0
    env = sim.env
    # Stepping by hand (rather than env.run) counts the events: the simulator's work, which must scale with sequences.
    # Until the loop's end is *processed*: a loop that fails is triggered at once, and only processing re-raises.
    while not done.processed:
        if env.peek() == float("inf"):
            raise RuntimeError(f"the simulation of {bound.scenario.name!r} stalled at t={env.now:.3f} s with steps "
                               "left: a process waits for an event nothing will trigger (a bug in rlsim)")
        env.step()
        events += 1
    for engine in sim.engines:
        engine.close()
    log = sim.recorder.freeze(env.now, events)
    return RunOutput(log, time.perf_counter() - began)
