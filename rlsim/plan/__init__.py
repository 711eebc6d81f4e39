"""`rlsim plan`: the best placement, schedule and parallel layout for a workload on a GPU budget (docs/plan.md)."""
from rlsim.exports import lazy_exports
from rlsim.plan.candidates import Candidate, candidates  # light: `rlsim plan --help` reads its schedules

__all__ = ["Candidate", "Evaluated", "Plan", "candidates", "explanation", "plan", "plan_dict", "plan_text"]

# The planner simulates, so it loads on first use.
__getattr__, __dir__ = lazy_exports(__name__, {
    "Evaluated": "rlsim.plan.planner", "Plan": "rlsim.plan.planner", "plan": "rlsim.plan.planner",
    "explanation": "rlsim.plan.explain", "plan_dict": "rlsim.plan.text", "plan_text": "rlsim.plan.text"})
