"""Prefill engines of a prefill/decode-disaggregated rollout, and the router between them and the decode engines
(Splitwise, DistServe; RollArt's hardware affinity puts the compute-bound prefill on H800/H100-class GPUs and the
bandwidth-bound decode on H20-class ones).

A prefill engine is a rollout engine that never decodes: it batches the prompts routed to it in chunked iterations
under its own `max_num_batched_tokens` (priced by the prefill cost model of its GPU type and TP), samples each
sequence's first token, and hands the sequence to the decode engine chosen for it, keeping its KV cache until that
engine has fetched it (`rlsim.sim.engine.kv_fetch`): a decode engine short of cache room holds the prefill engine's
cache, and so its admissions, back.

Routing. The load balancer (`schedule.load_balancer`) picks the decode engine when a rollout is dispatched, as
vLLM's P/D proxy and SGLang's router pick a (prefill, decode) pair per request. The prefill engine is the one with the
fewest context tokens queued, prefilling or held for transfer — except that a sample of a GRPO group goes where
samples of its group still are, so the group prefills its prompt once (vLLM's prefix caching on the prefill instance).
"""
from __future__ import annotations

from collections.abc import Callable

import simpy

from rlsim.events import KVTransfer
from rlsim.sim.engine.kv_fetch import KVFetch
from rlsim.sim.engine.lifecycle import SequenceLifecycle
from rlsim.sim.engine.slot import Slot
from rlsim.sim.recorder import Recorder
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout

# seconds to move a KV cache of so many tokens from prefill engine p to decode engine d: (p, d, tokens) -> seconds
TransferSeconds = Callable[[int, int, int], float]


class PrefillEngine(RolloutEngine):
    """A rollout engine that only prefills: each sequence leaves for its decode engine once its first token is
    sampled, its KV cache held here until fetched (`outbound` of them). Named `prefill0`, `prefill1`, …; its busy time
    is `prefill` in the `gen` stage."""

    __slots__ = ("outbound", "on_prefilled")
    decodes_its_prefills = False  # its prefills leave for their decode engines

    def __init__(self, env: simpy.Environment, index: int, costs, kv_capacity_tokens: int, max_num_seqs: int,
                 max_num_batched_tokens: int, first_gpu: int, gpu_count: int, recorder: Recorder, mode: str = "fast"):
        super().__init__(env, index, costs, kv_capacity_tokens, max_num_seqs, max_num_batched_tokens, first_gpu,
                         gpu_count, recorder, _never_finishes, mode=mode,  # type: ignore[arg-type]
                         busy_labels=("prefill", "prefill", "gen"), unit=f"prefill{index}")
        self.lifecycle = _PrefillLifecycle(self)
        self.outbound = 0  # sequences handed off whose KV cache is still here
        self.on_prefilled: Callable[[Rollout, PrefillEngine, Callable[[], None]], None] = _not_routed

    def submit(self, rollout: Rollout, predicted_tokens: float | None = None) -> None:
        """Queue the rollout's context to prefill (first come, first served); its decode engine stays its engine."""
        self.settle()
        if rollout.context_tokens + 1 > self.kv.capacity:
            raise ValueError(f"rollout {rollout.seq_id} needs {rollout.context_tokens + 1} KV tokens to prefill, more "
                             f"than prefill engine {self.index}'s whole cache of {self.kv.capacity}")
        self.scheduler.submit(rollout, 0.0)
        self.lifecycle.queued(rollout)

    def _holds_kv_in_transit(self) -> bool:
        return self.outbound > 0 or super()._holds_kv_in_transit()

    def _handed_off(self, slot: Slot) -> None:
        """The slot's first token is sampled: it leaves for its decode engine, its KV cache kept until fetched."""
        self.scheduler.hand_off(slot)
        self.outbound += 1
        tokens = slot.rollout.context_tokens  # its reservation: the context the decode engine fetches, and the token

        def release() -> None:
            self.kv.drop(slot, tokens)
            self.outbound -= 1
            self.telemetry.changed = True
            self.state.wake()  # room for the queue's head, if it waited for it

        self.on_prefilled(slot.rollout, self, release)


class _PrefillLifecycle(SequenceLifecycle):
    """A prefill engine's sequences end their stay at their first token."""

    __slots__ = ()

    def first_token(self, slot: Slot) -> None:
        engine = self.engine
        assert isinstance(engine, PrefillEngine)
        self.sampled(slot)
        engine._handed_off(slot)


class PrefillRouter:
    """Sends each rollout to a prefill engine and, once prefilled, to the decode engine it was dispatched to; prices
    the KV-cache transfers between them (`transfer_seconds`) and records each (`transfers`)."""

    def __init__(self, engines: list[PrefillEngine], transfer_seconds: TransferSeconds, kv_bytes_per_token: float,
                 recorder: Recorder):
        if not engines:
            raise ValueError("prefill/decode disaggregation needs at least one prefill engine")
        self.engines = engines
        self.transfer_seconds = transfer_seconds
        self.kv_bytes_per_token = kv_bytes_per_token
        self.recorder = recorder
        self._destination: dict[Rollout, KVFetch] = {}
        # group -> [the prefill engine its samples go to, its samples there (queued, prefilling or held for transfer)]
        self._group_at: dict[int, list] = {}
        for engine in engines:
            engine.on_prefilled = self._prefilled

    def prefill(self, rollout: Rollout, fetch: KVFetch) -> None:
        self._destination[rollout] = fetch
        at = self._group_at.get(rollout.group)
        if at is None or not at[1]:
            chosen = min(self.engines, key=lambda engine: (engine.queued_tokens + engine.kv_used_tokens, engine.index))
            at = self._group_at[rollout.group] = [chosen, 0]
        at[1] += 1
        at[0].submit(rollout)

    def seconds(self, source: int, destination: int, tokens: int) -> float:
        return self.transfer_seconds(source, destination, tokens)

    def record(self, rollout: Rollout, source: int, destination: int, start: float, end: float, tokens: int) -> None:
        self.recorder.kv_transfer(KVTransfer(rollout.seq_id, f"prefill{source}", f"engine{destination}", start, end,
                                             tokens, tokens * self.kv_bytes_per_token))

    def _prefilled(self, rollout: Rollout, source: PrefillEngine, release: Callable[[], None]) -> None:
        at = self._group_at[rollout.group]

        def released() -> None:
            release()
            at[1] -= 1
            if not at[1]:
                del self._group_at[rollout.group]

        self._destination.pop(rollout).prefilled(rollout, source.index, released)


def _never_finishes(rollout: Rollout) -> None:
    raise RuntimeError(f"rollout {rollout.seq_id} finished on a prefill engine (a bug in rlsim)")


def _not_routed(rollout: Rollout, engine: PrefillEngine, release: Callable[[], None]) -> None:
    raise RuntimeError(f"prefill engine {engine.index} has no router (a bug in rlsim)")
