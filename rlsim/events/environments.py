"""What an environment pool did in a run (workload.environments): each sandbox's life, each tool-calling turn's
wait and execution, each hold of a sandbox. Plain arrays, frozen with the event log; metrics read them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EnvironmentRecord:
    scope: str  # "call" or "trajectory": what a sandbox is held for
    max_sandboxes: int  # the concurrency limit
    warm_sandboxes: int  # running from the start, never stopped for idleness (numbered first)
    usd_per_sandbox_hour: float
    sandbox_started: np.ndarray  # per sandbox: when it was asked for (0 for the warm ones)
    sandbox_ready: np.ndarray  # when its start-up ended (the wall time if it had not)
    sandbox_stopped: np.ndarray  # when it stopped (the wall time if it had not)
    on_demand: np.ndarray  # started during the run, paying a cold start
    # Per completed use of a sandbox — a call (scope call), or a turn's calls side by side (scope trajectory):
    call_arrived: np.ndarray  # when its calls were made
    call_acquired: np.ndarray  # when it had a sandbox (the wait for one, and its cold start, before)
    call_done: np.ndarray  # when its calls returned
    hold_start: np.ndarray  # per hold of a sandbox (a call, or a trajectory from its first call to its end)
    hold_end: np.ndarray
