"""What every kind of rollout engine answers alike (`rlsim.sim.rollout.RolloutEngine`, continuous batching, and
`rlsim.sim.static_batch.StaticBatchEngine`, static batches): how many rollouts it holds, whether it is paused, its
resumption with new weights, its KV capacity and its probe."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy

from rlsim.costs.rollout import IterationCosts
from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.running import RunningSlots
from rlsim.sim.engine.state import PAUSED, EngineState
from rlsim.sim.engine.telemetry import EngineTelemetry, Probe
from rlsim.sim.engine.waiting import WaitingQueue
from rlsim.sim.environments import ToolLatency
from rlsim.sim.sequence import Rollout


class EngineControls:
    """Members an engine shares, over the parts it builds: its `state`, `telemetry`, `kv`, queue and running
    sequences."""

    # `version`: the policy version of the weights it holds.
    __slots__ = ("env", "index", "costs", "max_num_seqs", "first_gpu", "gpu_count", "mode", "on_finish",
                 "on_queue_empty", "version", "environment", "_waiting", "_running")

    env: simpy.Environment
    index: int
    costs: IterationCosts
    max_num_seqs: int
    first_gpu: int
    gpu_count: int
    mode: str
    on_finish: Callable[[Rollout], None]
    on_queue_empty: Callable[[Any], None] | None
    environment: ToolLatency  # where its trajectories' tool calls run (rlsim.sim.environments)
    state: EngineState
    telemetry: EngineTelemetry
    kv: KVLedger
    _waiting: WaitingQueue
    _running: RunningSlots

    def _set_common(self, env: simpy.Environment, index: int, costs: IterationCosts, max_num_seqs: int,
                    first_gpu: int, gpu_count: int, mode: str, on_finish: Callable[[Rollout], None]) -> None:
        """The members every kind of engine sets alike, on GPUs [first_gpu, first_gpu + gpu_count), with an empty
        queue, no rollout running and policy version 0; the parts each builds are its own."""
        if mode not in ("fast", "exact"):
            raise ValueError(f"mode must be 'fast' or 'exact', got {mode!r}")
        self.env, self.index, self.costs, self.max_num_seqs = env, index, costs, max_num_seqs
        self.first_gpu, self.gpu_count, self.mode, self.on_finish = first_gpu, gpu_count, mode, on_finish
        self.on_queue_empty = None  # set by work stealing
        self.environment = ToolLatency(env)  # the run's environment pool, when it is built, replaces it
        self.version = 0
        self._waiting = WaitingQueue()
        self._running = RunningSlots()

    @property
    def outstanding(self) -> int:
        """Rollouts submitted and not finished: waiting plus running."""
        return len(self._waiting) + len(self._running)

    @property
    def paused(self) -> bool:
        return self.state.activity is PAUSED

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv.capacity

    @property
    def probe(self) -> Probe | None:
        return self.telemetry.probe

    @probe.setter
    def probe(self, probe: Probe | None) -> None:
        self.telemetry.probe = probe

    def resume(self, version: int) -> None:
        """Continue with weights of policy `version`."""
        if self.state.activity is not PAUSED:
            raise RuntimeError(f"engine {self.index} is not paused")
        self.version = version
        self.state.resume()
