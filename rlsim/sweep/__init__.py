"""Sweeps: a sweep file expands into many scenarios (points), which run on local cores or a Ray cluster into a
resumable folder with a results table and a report (docs/sweeps.md)."""
from rlsim.sweep.points import Expansion, Point, expand, point_id
from rlsim.sweep.runner import SweepRun, run_sweep
from rlsim.sweep.spec import SweepSpec, load_sweep

__all__ = ["Expansion", "Point", "SweepRun", "SweepSpec", "expand", "load_sweep", "point_id", "run_sweep"]
