"""The parallel groups a training GPU communicates in, each priced as a `Collective` from the cluster's topology."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlsim.costs.collectives import HOST_LINK_EFFICIENCY, Op, collective_time
from rlsim.costs.layout import TrainingLayout
from rlsim.costs.memo import Memo
from rlsim.topology import GPU, ClusterTopology, CommGroup

Collective = Callable[[Op, float], float]
"""Seconds of a collective on one parallel group: op ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
"send_recv") and bytes — all_reduce: the buffer; all_gather: the gathered output; reduce_scatter: its input;
all_to_all: what one rank sends; send_recv: the message."""


@dataclass(frozen=True)
class GroupCollectives:
    """Collective costs on each parallel group a training GPU belongs to. A group of degree 1 needs none.

    dp: ranks holding the same dense weights (dp·cp): ZeRO/FSDP traffic and gradient reduction.
    expert_dp: ranks holding the same routed experts (tp·cp·dp/ep). tp, cp, ep: their groups.
    pp: send_recv to the next pipeline stage, and the all_reduce of the gradient norm across stages.
    host: seconds to copy bytes between host memory and this GPU (offloaded state).
    """

    dp: Collective | None = None
    expert_dp: Collective | None = None
    tp: Collective | None = None
    cp: Collective | None = None
    ep: Collective | None = None
    pp: Collective | None = None
    host: Callable[[float], float] | None = None

    @classmethod
    def on_cluster(cls, topology: ClusterTopology, gpus: Sequence[GPU], layout: TrainingLayout) -> GroupCollectives:
        """The groups of the first GPU of a training job on `gpus` (in fill order), priced by `collective_time`.

        Ranks follow Megatron-Core's default order, TP fastest, then CP, DP and PP (rank = t + tp·(c + cp·(d + dp·s))),
        so TP stays inside a node. Routed experts use the folded grid (expert TP 1): EP groups are consecutive ranks of
        a stage, expert data parallelism strides over them. Every rank of a regular layout sees groups of the same shape.
        Every rank of a stage reduces its gradients and gathers its weights at once, each in its own data-parallel
        group, so those groups share the NIC rails of a node that has fewer rails than GPUs.
        """
        dp = layout.dp
        stage = layout.tp * layout.cp * dp
        if len(gpus) < stage * layout.pp:
            raise ValueError(f"the layout needs {stage * layout.pp} GPUs, {len(gpus)} given")

        def on(ranks: Sequence[int], alongside: Sequence[GPU] = ()) -> Collective | None:
            return _priced(topology.group((gpus[r] for r in ranks), alongside)) if len(ranks) > 1 else None

        hardware = topology.hardware(gpus[0].pool)
        link = hardware.host_link
        host_rate = link.bytes_per_s * HOST_LINK_EFFICIENCY
        return cls(
            dp=on([layout.tp * j for j in range(layout.cp * dp)], gpus[:stage]),
            expert_dp=on([layout.ep * j for j in range(stage // layout.ep)], gpus[:stage]),
            tp=on(range(layout.tp)),
            cp=_ring(topology, [gpus[layout.tp * j] for j in range(layout.cp)]) if layout.cp > 1 else None,
            ep=on(range(layout.ep)),
            pp=_pipeline(topology, [gpus[stage * s] for s in range(layout.pp)]) if layout.pp > 1 else None,
            host=lambda nbytes: link.latency_s + nbytes / host_rate,
        )


def _priced(group: CommGroup) -> Collective:
    """`collective_time` on one communicator, memoised: training asks the same few sizes over and over."""
    seconds: Memo[tuple[Op, float], float] = Memo(lambda key: collective_time(key[0], key[1], group).seconds)
    return lambda op, nbytes: seconds[op, nbytes]


def _ring(topology: ClusterTopology, ring: Sequence[GPU]) -> Collective:
    """Collectives over the whole group; send_recv to the next rank of the ring, at the slowest hop's price (the ring
    advances in lock-step, so a hop that leaves the node sets every step's time)."""
    whole = _priced(topology.group(ring))
    hops = [_priced(topology.group([a, b])) for a, b in zip(ring, [*ring[1:], ring[0]], strict=True)]
    return lambda op, nbytes: max(hop(op, nbytes) for hop in hops) if op == "send_recv" else whole(op, nbytes)


def _pipeline(topology: ClusterTopology, firsts: Sequence[GPU]) -> Collective:
    """send_recv between neighbouring stages (first to second stage), all_reduce across all stages."""
    neighbours = _priced(topology.group(firsts[:2]))
    stages = _priced(topology.group(firsts))
    return lambda op, nbytes: neighbours(op, nbytes) if op == "send_recv" else stages(op, nbytes)


