"""Which modules a wheel of rlsim compiles to C with mypyc, and whether this installation runs them compiled.

`pip install .` builds them (hatch_build.py at the repo's root reads COMPILED_MODULES from this file, which is why it
imports nothing but the standard library); an editable install, a source checkout, or a wheel built where mypyc or a
C compiler was missing (or with RLSIM_PURE_PYTHON=1) runs the same modules interpreted, with the same results.
"""
from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

# The engine, and what it calls at each boundary a step books (docs/simulation.md, "What a step costs the simulator,
# and where"): the iteration pricing with the scalar part of the kernel model every prefill iteration asks
# (costs/iteration_work.py), the recorder with its columns, and what each rollout and update passes through on the
# loop's side (sim/groups.py's ledger, sim/balance.py's dispatch, sim/dp_balance.py's packing, sim/worker_queue.py's
# reward workers). Each was kept for what it saved (benchmarks/bench_native.py, or instructions counted by callgrind
# where the machine was too noisy to time).
# The rest of the kernel model (costs/engine_kernels.py, costs/compute.py) stays interpreted: it takes a token count or
# an array of them, which a compiled function refuses at its typed boundary.
# No package's __init__ is compiled: it would hold nothing worth it, and a compiled package's __path__ is mypyc's guess.
COMPILED_MODULES = (
    "rlsim/sim/rollout.py", "rlsim/sim/clock.py", "rlsim/sim/sequence.py", "rlsim/sim/prefill.py",
    "rlsim/sim/static_batch.py",
    "rlsim/sim/engine/admission.py", "rlsim/sim/engine/controls.py",
    "rlsim/sim/engine/decode_batch.py", "rlsim/sim/engine/kv_fetch.py", "rlsim/sim/engine/kv_ledger.py",
    "rlsim/sim/engine/lifecycle.py", "rlsim/sim/engine/planned.py", "rlsim/sim/engine/preemption_chain.py",
    "rlsim/sim/engine/prefill_run.py", "rlsim/sim/engine/queue_order.py", "rlsim/sim/engine/scheduler.py",
    "rlsim/sim/engine/slot.py", "rlsim/sim/engine/state.py", "rlsim/sim/engine/telemetry.py",
    "rlsim/sim/engine/running.py", "rlsim/sim/engine/tool_waits.py", "rlsim/sim/engine/waiting.py",
    "rlsim/costs/rollout.py", "rlsim/costs/decode_profile.py", "rlsim/costs/memo.py", "rlsim/costs/iteration_work.py",
    "rlsim/events/tables.py", "rlsim/sim/recorder.py",
    "rlsim/sim/groups.py", "rlsim/sim/balance.py", "rlsim/sim/dp_balance.py", "rlsim/sim/worker_queue.py",
)

# mypyc's shared library of the compiled modules: a module at the top of site-packages, beside the package, which is
# where mypyc expects it (a module it loads records its __file__ as that folder + the module's path); named after rlsim
# rather than mypyc's default hash of the module names.
GROUP_NAME = "rlsim_engine"

_PACKAGE_ROOT = Path(__file__).parent.parent


def compiled_modules() -> list[str]:
    """The COMPILED_MODULES that Python would load from an extension module here, found without importing them
    (`rlsim --version` stays quick): an extension module beside a .py file is the one imported."""
    return [module for module in COMPILED_MODULES
            if any((_PACKAGE_ROOT / module).with_suffix(suffix).exists() for suffix in EXTENSION_SUFFIXES)]


def engine_build() -> str:
    """"compiled" when every engine module loads compiled, "interpreted" when none does, "partly compiled" between
    (a source tree with stray extension modules in it)."""
    count = len(compiled_modules())
    if count == len(COMPILED_MODULES):
        return "compiled"
    return "interpreted" if count == 0 else "partly compiled"
