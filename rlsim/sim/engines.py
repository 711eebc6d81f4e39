"""The kinds of rollout engine a run drives, which the controller, the balancers and the group ledger use alike:
continuous batching (vLLM, SGLang: `rlsim.sim.rollout`) and static batches (Hugging Face generate():
`rlsim.sim.static_batch`)."""
from __future__ import annotations

from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.static_batch import StaticBatchEngine

GenerationEngine = RolloutEngine | StaticBatchEngine
