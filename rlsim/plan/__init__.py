"""`rlsim plan`: the best placement, schedule and parallel layout for a workload on a GPU budget (docs/plan.md)."""
from rlsim.plan.candidates import Candidate, candidates
from rlsim.plan.explain import explanation
from rlsim.plan.planner import Evaluated, Plan, plan
from rlsim.plan.text import plan_dict, plan_text

__all__ = ["Candidate", "Evaluated", "Plan", "candidates", "explanation", "plan", "plan_dict", "plan_text"]
