"""`rlsim estimate`: an analytical model of one steady-state RL step, priced by the simulator's own cost models without
simulating (step.py), from the slowest engine's continuous batching (generation.py, engine.py) and one data-parallel
rank's training (training.py); rlsim.validation.estimate_accuracy measures it against the simulation
(docs/estimate.md)."""
from rlsim.estimate.step import STAGES, TRAINING_STAGES, StageEstimate, StepEstimate, estimate_step

__all__ = ["STAGES", "TRAINING_STAGES", "StageEstimate", "StepEstimate", "estimate_step"]
