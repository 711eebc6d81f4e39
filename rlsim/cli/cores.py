"""How many processes a command may start by default: the cores this process may use that are not already busy."""
from __future__ import annotations

import os


def free_cores() -> int:
    """Cores available to this process less the current load (the 1-minute load average), at least one: on a quiet
    machine every core, on a shared one only what others leave. Results never depend on it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        busy = round(os.getloadavg()[0])
    except OSError:
        busy = 0
    return max(1, cores - busy)
