"""The long-tail remedies (`schedule.long_tail`), one file each in this folder. A file registers its `LongTailKind`
(rlsim.config.long_tail): its parameter class, named as its paper names them, the builder of the controller that runs
it (the simulation, its reward stage and its group filter in; rlsim.sim.schedules.sync calls it), its checks and its
facts. Importing this package imports every file in it, so a new remedy is a new file and nothing else.

The loader learns the remedies' names and parameters here (rlsim.registry), so nothing in it imports a simulator at
import time: each builder imports its controller when it runs.
"""
from __future__ import annotations

import pkgutil
from importlib import import_module

from rlsim import registry
from rlsim.config.long_tail import LongTailKind
from rlsim.registry import Registry

REMEDIES: Registry[LongTailKind] = registry.LONG_TAIL_REMEDIES
register_remedy = REMEDIES.register

for _module in pkgutil.iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")
