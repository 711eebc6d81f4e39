"""What every kind of rollout engine answers alike (`rlsim.sim.rollout.RolloutEngine`, continuous batching, and
`rlsim.sim.static_batch.StaticBatchEngine`, static batches): how many rollouts it holds, whether it is paused, its
resumption with new weights, its KV capacity and its probe."""
from __future__ import annotations

from collections import deque

from rlsim.sim.engine.kv_ledger import KVLedger
from rlsim.sim.engine.slot import Slot
from rlsim.sim.engine.state import PAUSED, EngineState
from rlsim.sim.engine.telemetry import EngineTelemetry, Probe
from rlsim.sim.sequence import Rollout


class EngineControls:
    """Members an engine shares, over the parts it builds: its `state`, `telemetry`, `kv`, queue and running
    sequences."""

    __slots__ = ("version",)  # the policy version of the weights it holds

    index: int
    state: EngineState
    telemetry: EngineTelemetry
    kv: KVLedger
    _waiting: deque[Rollout]
    _running: dict[Rollout, Slot]

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
