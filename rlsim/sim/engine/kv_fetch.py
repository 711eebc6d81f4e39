"""A decode engine's side of prefill/decode disaggregation: rollouts prefilled on a prefill engine, whose KV cache it
fetches once it has room for it, then decodes without prefilling.

The flow follows vLLM's P/D code path (NixlConnector, `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`,
and the V1 scheduler's WAITING_FOR_REMOTE_KVS state) and SGLang's disaggregation mode
(`python/sglang/srt/disaggregation/decode.py`: prealloc queue, transfer queue, then a prebuilt batch that skips the
prefill forward):

* a rollout whose prefill completed (its first token sampled there) joins the decode engine's queue; admission
  reserves its KV cache as for any sequence (a slot's worth of blocks: back-pressure, since the prefill engine keeps its
  copy until it is fetched), less what the decode engine's prefix cache already holds (its group's prompt, its own
  context left there by a released tool call): only the missing tokens cross the link, as NixlConnector pulls only the
  blocks the local prefix cache lacks;
* while the KV cache crosses the link the sequence holds its blocks but is not scheduled (vLLM keeps it out of the
  running queue), so it counts against `max_num_seqs` and the cache, and is never a preemption victim;
* when it arrives the sequence joins the decode batch at the next boundary with nothing to prefill;
* a decode-side preemption or interruption afterwards recomputes its KV cache on the decode engine itself: vLLM
  fetches a request's KV cache once ("Only trigger 1 KV transfer per request": `do_remote_prefill` is cleared once its
  blocks are allocated), so a preempted request is re-prefilled locally like any other.

Transfers into one decode engine share its links and run one after another (first come, first served), each priced as
the path's latency plus the bytes (tokens × KV bytes per token, in the cache's dtype) over the path's bandwidth between
the two engines' GPUs (the router's `seconds`).
"""
from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Protocol

import simpy

from rlsim.sim.clock import sim_now
from rlsim.sim.engine.slot import Slot
from rlsim.sim.sequence import Rollout

if TYPE_CHECKING:
    from rlsim.sim.rollout import RolloutEngine


class PrefillRouter(Protocol):
    """Sends rollouts to prefill engines, and prices and records the KV-cache transfers back."""

    def prefill(self, rollout: Rollout, fetch: KVFetch) -> None:
        """Prefill the rollout's context on a prefill engine, then hand it to `fetch`'s decode engine."""
        ...

    def seconds(self, source: int, destination: int, tokens: int) -> float:
        """Seconds to move `tokens` tokens of KV cache from prefill engine `source` to decode engine `destination`."""
        ...

    def record(self, rollout: Rollout, source: int, destination: int, start: float, end: float, tokens: int) -> None:
        ...


class KVFetch:
    """The decode engine's rollouts that are elsewhere: at a prefill engine (`pending`), prefilled and queued here
    with their KV cache still there (`remote`: the prefill engine and how to free its copy), or crossing the link
    (`fetching` of them); those that `arrived` join the decode batch at the next boundary."""

    __slots__ = ("engine", "router", "pending", "pending_tokens", "remote", "fetching", "arrived", "inbound")

    def __init__(self, engine: RolloutEngine, router: PrefillRouter):
        self.engine = engine
        self.router = router
        self.pending: set[Rollout] = set()
        self.pending_tokens = 0  # context tokens of the pending rollouts (what fetching them will cache here)
        self.remote: dict[Rollout, tuple[int, Callable[[], None]]] = {}
        self.fetching = 0
        self.arrived: list[Slot] = []
        self.inbound = simpy.Resource(engine.env, capacity=1)  # the engine's links, one transfer at a time

    @property
    def elsewhere(self) -> int:
        """Rollouts of this engine not in its queue or running: at a prefill engine, or crossing the link."""
        return len(self.pending) + self.fetching

    def send(self, rollout: Rollout) -> None:
        """The rollout, submitted here (or back from tool calls that released its slot: a new turn is a new request),
        goes to a prefill engine first."""
        self.pending.add(rollout)
        self.pending_tokens += rollout.context_tokens
        self.router.prefill(rollout, self)

    def prefilled(self, rollout: Rollout, source: int, release: Callable[[], None]) -> None:
        """Prefill engine `source` sampled the rollout's first token: it queues here, its KV cache held there until
        fetched (`release` frees it there)."""
        self.pending.discard(rollout)
        self.pending_tokens -= rollout.context_tokens - 1
        self.remote[rollout] = (source, release)
        engine = self.engine
        engine.settle()
        engine.scheduler.queue(rollout)
        engine.lifecycle.queued(rollout)

    def takes(self, slot: Slot) -> bool:
        """The scheduler just admitted the slot: when its KV cache is on a prefill engine, fetch it instead of
        prefilling (the slot leaves the running sequences and the iteration's prefills meanwhile). Whether it did."""
        rollout = slot.rollout
        source = self.remote.pop(rollout, None)
        if source is None:
            return False
        engine = self.engine
        scheduler = engine.scheduler
        scheduler.prefilling.pop()  # the admission's, the latest
        scheduler.running.remove(slot)
        # The admission reserved the context plus the token its prefill would sample; that token was sampled by the
        # prefill engine, and its KV is written by the first decode step here, as after a local prefill.
        engine.kv.used -= 1
        missing = slot.prefill_left - 1  # tokens whose KV the prefill engine holds and this engine's cache lacks
        slot.prefill_left = 0
        slot.computed = rollout.context_tokens - 1
        rollout.admissions -= 1  # one admission, begun on the prefill engine
        self.fetching += 1
        engine.env.process(self._fetch(slot, missing, *source))
        return True

    def join_arrived(self) -> None:
        """At a boundary: the sequences whose KV cache arrived decode from the next iteration on (or end their turn,
        when the prefill engine's token was their last)."""
        engine = self.engine
        lifecycle, batch, running = engine.lifecycle, engine.batch, engine.scheduler.running
        engine.telemetry.changed = True
        for slot in self.arrived:
            rollout = slot.rollout
            running.add(slot)
            if rollout.remaining <= 0:
                lifecycle.turn_end(slot)
            else:
                batch.join(slot)
        self.arrived.clear()

    def _fetch(self, slot: Slot, tokens: int, source: int, release: Callable[[], None]) -> Generator:
        engine = self.engine
        env = engine.env
        with self.inbound.request() as turn:
            yield turn
            start = sim_now(env)
            yield env.timeout(self.router.seconds(source, engine.index, tokens))
        self.router.record(slot.rollout, source, engine.index, start, sim_now(env), tokens)
        release()
        engine.settle()
        self.fetching -= 1
        self.arrived.append(slot)
        engine.state.wake()
