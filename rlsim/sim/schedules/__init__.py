"""The schedules (`schedule.mode`), one file each in this folder. A file registers its `ScheduleKind`
(rlsim.config.schedule_kind): the builder of the controller that runs the steps (the simulation, its reward stage and
its group filter in; rlsim.sim.loop calls it once per run), and the facts the loader's checks, the default warm-up and
the estimate ask about the schedule. Importing this package imports every file in it, so a new schedule is a new file
and nothing else.

This package is where a scenario's loader learns the schedules' names and facts (rlsim.registry), so nothing in it
imports a simulator at import time: each builder imports its controller when it runs.
"""
from __future__ import annotations

import pkgutil
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING

from rlsim import registry
from rlsim.config.schedule_kind import ScheduleKind
from rlsim.registry import Registry

if TYPE_CHECKING:
    from rlsim.sim.build import Simulation
    from rlsim.sim.controller import Controller
    from rlsim.sim.dynamic_sampling import Sampling
    from rlsim.sim.reward import Reward

ControllerBuilder = Callable[["Simulation", "Reward", "Sampling"], "Controller"]
SCHEDULES: Registry[ScheduleKind[ControllerBuilder]] = registry.SCHEDULES
register_schedule = SCHEDULES.register

for _module in pkgutil.iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")
