"""`rlsim plan`: the best placement, schedule and parallel layout for a workload on a GPU budget (docs/plan.md)."""
from rlsim.plan.candidates import Candidate, candidates
from rlsim.plan.explain import explanation
from rlsim.plan.planner import Evaluated, Plan, plan

__all__ = ["Candidate", "Evaluated", "Plan", "candidates", "explanation", "plan"]
