"""Prefill/decode disaggregation priced for the simulation and the estimate alike: the prefill engines' cost model and
KV budget, and the time a KV cache takes from a prefill engine to a decode engine."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

from rlsim.config.bound import Bound
from rlsim.costs.collectives import COPY_LINK_EFFICIENCY, NIC_EFFICIENCY
from rlsim.costs.layout import EngineLayout
from rlsim.costs.memory import engine_kv_tokens
from rlsim.costs.rollout import EngineCosts
from rlsim.pricing.engines import CollectivePricer, collective_seconds, engine_costs
from rlsim.pricing.layouts import prefill_layout
from rlsim.pricing.memory import prefill_memory
from rlsim.topology import GPU, ClusterTopology, Path


def prefill_engines(bound: Bound) -> EngineLayout:
    """The scenario's prefill engines; raises when it has none."""
    layout = prefill_layout(bound.scenario.placement.rollout)
    if layout is None:
        raise ValueError("the scenario has no prefill engines (placement.rollout.prefill)")
    return layout


def prefill_costs(bound: Bound, topology: ClusterTopology, gpus: Sequence[GPU],
                  collective: CollectivePricer = collective_seconds) -> EngineCosts:
    """The cost model of the prefill engines, on their own GPU type and TP (`gpus`: the first engine's)."""
    layout = prefill_engines(bound)
    return engine_costs(bound, bound.model, layout, topology.group(gpus[:layout.tp]), collective)


def prefill_kv_tokens(bound: Bound) -> int:
    """KV-cache tokens each prefill engine holds: what it prefills and what waits there to be fetched."""
    layout = prefill_engines(bound)
    memory = prefill_memory(bound.scenario, bound.model, bound.gpu(layout.pool))
    assert memory is not None
    return engine_kv_tokens(memory, bound.model, layout.tp)


def kv_transfer_seconds(bound: Bound, topology: ClusterTopology, prefill: Sequence[Sequence[GPU]],
                        decode: Sequence[Sequence[GPU]]) -> Callable[[int, int, int], float]:
    """Seconds to move `tokens` tokens of KV cache (in the cache's dtype: the model's bytes per token) from prefill
    engine p's GPUs to decode engine d's: the path's latency plus the bytes over its bandwidth.

    Inside one scale-up domain the path is NVLink's, at its measured copy efficiency. Across domains (nodes, pools)
    each TP rank of the decode engine reads its shard of the blocks from the prefill engine with its own transfer
    agent (vLLM's NixlConnector: a NIXL agent per worker; SGLang's Mooncake or NIXL backends write per rank), which
    UCX or Mooncake put on the NIC nearest its GPU: the NICs of the side with fewer, each at the NIC rate collectives
    reach (a floor for plain RDMA copies), not every NIC of the node through NVLink hops as a collective can."""
    per_token = bound.model.kv_bytes_per_token

    @cache
    def path(p: int, d: int) -> Path:
        source, sink = prefill[p], decode[d]
        fabric = topology.transfer(source, sink, COPY_LINK_EFFICIENCY)
        if "scale_out" not in fabric.scopes:
            return fabric
        nics = min(len({(g.pool, g.node, topology.rail(g)) for g in side}) for side in (source, sink))
        nic = min(_nic_bytes_per_s(topology, g.pool) for g in (source[0], sink[0]))
        return Path(nics * nic * NIC_EFFICIENCY, fabric.latency_s, fabric.scopes)

    def seconds(p: int, d: int, tokens: int) -> float:
        return path(p, d).seconds(tokens * per_token)

    return seconds


def _nic_bytes_per_s(topology: ClusterTopology, pool: str) -> float:
    link = topology.hardware(pool).inter_node
    if link is None:
        raise ValueError(f"pool {pool!r} has no scale-out network for KV-cache transfers")
    return link.bytes_per_s
