"""rlsim: a discrete-event simulator of GPU clusters running RL post-training of large language models.

The notebook API (docs/api.md): `load_scenario`, `with_`, `simulate` → `Result`, `compare` → `Comparison`.
"""
from importlib.metadata import PackageNotFoundError, version

from rlsim.exports import lazy_exports

try:
    __version__ = version("rlsim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["Comparison", "MeasuredWindowWarning", "Result", "Scenario", "ScenarioError", "__version__", "compare",
           "load_scenario", "simulate", "with_"]

# Where each public name lives. They load on first use, so `rlsim --version` and the CLI's start-up do not pay for
# the simulator and plotly.
__getattr__, __dir__ = lazy_exports(__name__, {
    "Comparison": "rlsim.api", "MeasuredWindowWarning": "rlsim.api", "Result": "rlsim.api", "compare": "rlsim.api",
    "load_scenario": "rlsim.api", "simulate": "rlsim.api", "with_": "rlsim.api", "Scenario": "rlsim.config.schema",
    "ScenarioError": "rlsim.errors"})
