"""The cluster as a graph: GPUs, scale-up domains, NICs, the scale-out fabric and host memory, with link bandwidths.

Built from a bound scenario's pools (`ClusterTopology.build(bind(scenario))`). It answers two questions the cost models
ask: how fast can data move from one set of GPUs to another over every parallel link there is (`transfer`), and what a
communicator over a set of GPUs looks like (`group`: domains spanned, links, NIC rails, in-switch reduction).

Graph nodes:

* `GPU` objects, each with a receive port ("rx", gpu) where its incoming links land;
* ("switch", pool, domain): the NVSwitch of a scale-up domain (one per node, or one per NVL72 rack of several nodes).
  A full mesh such as MI300X xGMI has no switch: its GPUs are joined pairwise at the per-peer rate;
* ("nic", pool, node, rail): scale-out NICs, GPU i wired to rail i (rail-optimised);
* host memory: ("host", pool, node, gpu), one port per GPU; ("host", pool, node), shared by the node's GPUs, when
  they have no scale-up fabric and talk through the CPU;
* ("fabric", pool): a non-blocking fat tree per pool, and ("core",) joining the pools' fabrics.

Edges are directed, one per direction, and carry `capacity` (spec bytes/s of one direction), `latency` (s) and
`scope` ("scale_up", "scale_out" or "host", the link profile's scope). Bandwidths are spec values; achievable
fractions are the cost models' business (`transfer` takes them as an argument).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from rlsim.config.bound import Bound, PoolHardware
from rlsim.config.role_groups import own_gpus
from rlsim.hardware import Interconnect


@dataclass(frozen=True)
class RoleGPUs:
    """The GPUs of each role, in rank order (`ClusterTopology.place_roles`)."""

    rollout: tuple[GPU, ...]
    training: tuple[GPU, ...]
    reward: tuple[GPU, ...] = ()  # a reward model's or judge's GPUs; none without
    critic: tuple[GPU, ...] = ()  # the critic's GPUs (the training GPUs unless it has its own); none without
    reference: tuple[GPU, ...] = ()  # the reference policy's GPUs, likewise
    prefill: tuple[GPU, ...] = ()  # prefill engines' GPUs (prefill/decode disaggregation); none without


DomainKey = tuple[str, int]  # a scale-up domain: (pool, index)
RailKey = tuple[int, int]  # a NIC rail of a node: (node, rail)

_SOURCE = ("source",)
_SINK = ("sink",)
_CORE = ("core",)


@dataclass(frozen=True, order=True)
class GPU:
    """One accelerator: its pool, the index of its node in the pool, and its index inside the node."""

    pool: str
    node: int
    local: int

    def __str__(self) -> str:
        return f"{self.pool}/node{self.node}/gpu{self.local}"


@dataclass(frozen=True)
class Path:
    """How fast data moves from one GPU set to another.

    `bytes_per_s` is the maximum flow over all parallel routes (NVLink ports, every NIC rail, PXN hops through a
    peer GPU), with each link at its capacity times the efficiency asked for. `latency_s` is the lowest-latency route
    from the worst-placed source to its nearest destination. `scopes` names the kinds of link in the bottleneck cut.
    """

    bytes_per_s: float
    latency_s: float
    scopes: frozenset[str]

    def seconds(self, nbytes: float) -> float:
        """Time to move `nbytes` spread over the sources: one latency plus the bytes at the aggregate rate."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class CommGroup:
    """A communicator (NCCL group) over some GPUs, described by what its collectives can use.

    A domain is a scale-up domain (an NVSwitch node, an NVL72 rack, an xGMI mesh; for GPUs without a scale-up fabric,
    a node, whose GPUs talk over PCIe). Where the group is uneven or spans pools with different hardware, every
    figure is the least favourable one, since a collective runs at the pace of its slowest part.
    """

    gpus: tuple[GPU, ...]
    domains: int
    nodes: int
    gpus_per_domain: int  # most group members in any one domain
    scale_up: Interconnect  # link between members inside a domain (the host link when there is no scale-up fabric)
    scale_up_bytes_per_s: float  # spec per-GPU bandwidth toward the other members of its domain (a mesh gives peers only)
    scale_out: Interconnect | None  # one NIC; None when the group sits in one domain of a pool without a network
    nics_per_domain: int  # distinct NIC rails the members drive, in the least connected domain
    scale_out_bytes_per_s: float  # spec NIC bandwidth out of that domain: rails x NIC rate (capped by each GPU's PCIe)
    scale_out_bytes_per_s_per_gpu: float  # the same shared by the members of the domain, the busiest domain
    in_network_reduction: bool  # the group is inside one domain whose switches reduce in-network (NVLS)

    @property
    def size(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class _PoolLayout:
    hardware: PoolHardware
    nodes: int
    gpus_per_node: int
    nics_per_node: int  # 0: no scale-out network
    domain_gpus: int  # GPUs per scale-up domain (gpus_per_node when there is no scale-up fabric)

    @property
    def mesh(self) -> bool:
        # A fabric whose GPU pair gets less than a GPU's total bandwidth has no switch: it is a point-to-point mesh.
        link = self.hardware.intra_node
        return self.hardware.gpu.scale_up is not None and link.peer_bytes_per_s < link.bytes_per_s

    def domain(self, gpu: GPU) -> int:
        if self.domain_gpus >= self.gpus_per_node:
            return gpu.node // (self.domain_gpus // self.gpus_per_node)
        per_node = self.gpus_per_node // self.domain_gpus
        return gpu.node * per_node + gpu.local // self.domain_gpus

    def rail(self, gpu: GPU) -> int:
        """The NIC a GPU reaches directly (rail-optimised wiring: GPU i uses NIC i, NICs shared when fewer)."""
        return gpu.local * self.nics_per_node // self.gpus_per_node


@dataclass(frozen=True)
class ClusterTopology:
    """The cluster graph and the per-pool layout it was built from."""

    graph: nx.DiGraph
    layouts: Mapping[str, _PoolLayout]
    _flows: dict = field(default_factory=dict, compare=False, repr=False)  # memo of transfer(), per instance

    @classmethod
    def build(cls, bound: Bound) -> ClusterTopology:
        """The topology of every pool of a bound scenario, its links wired only for the nodes its roles can use: a pool
        of 100,000 nodes of which the placement takes two is not built link by link (its other GPUs still count,
        as unassigned)."""
        return cls.from_pools(bound.pools, wired_gpus=placed_gpus(bound))

    @classmethod
    def from_pools(cls, pools: Mapping[str, PoolHardware],
                   wired_gpus: Mapping[str, int] | None = None) -> ClusterTopology:
        """The topology of pools given directly (resolved `Pool`s with their hardware); `wired_gpus`, when given,
        the GPUs from the start of each pool whose nodes get links (at least one node; default: all)."""
        layouts = {name: _layout(hw) for name, hw in pools.items()}
        graph = nx.DiGraph()
        for name, layout in layouts.items():
            wired = layout.nodes if wired_gpus is None else min(
                layout.nodes, max(1, -(-wired_gpus.get(name, 0) // layout.gpus_per_node)))
            _add_pool(graph, name, layout, wired)
        return cls(graph=graph, layouts=layouts)

    # ---- placement --------------------------------------------------------------------------------------------

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(self.layouts)

    def hardware(self, pool: str) -> PoolHardware:
        return self._layout(pool).hardware

    def gpus(self, pool: str) -> list[GPU]:
        """Every GPU of a pool in fill order: node by node, local index within a node."""
        layout = self._layout(pool)
        return [GPU(pool, n, i) for n in range(layout.nodes) for i in range(layout.gpus_per_node)]

    def allocate(self, pool: str, count: int, offset: int = 0) -> tuple[GPU, ...]:
        """`count` consecutive GPUs of a pool after the first `offset` (roles fill nodes in order)."""
        gpus = self.gpus(pool)
        if count < 0 or offset < 0 or offset + count > len(gpus):
            raise ValueError(f"pool {pool!r} has {len(gpus)} GPUs; cannot take {count} after the first {offset}")
        return tuple(gpus[offset:offset + count])

    def place_roles(self, rollout: tuple[str, int], training: tuple[str, int], reward: tuple[str, int] | None = None,
                    *, training_after_rollout: bool, critic: tuple[str, int] | None = None,
                    reference: tuple[str, int] | None = None, prefill: tuple[str, int] | None = None) -> RoleGPUs:
        """Where each role's (pool, GPU count) lands: the engines first in their pool; training after them when
        `training_after_rollout` (the two share a pool but not GPUs), else from the start of its pool (sharing the
        engines' GPUs when the pool is theirs); a critic, then a reference policy, with GPUs of their own after every
        policy GPU in their pool, a reward model or judge after those, and prefill engines last. A role given no GPUs
        of its own gets none here (rlsim.pricing.weight_sync.role_gpus gives it those of the role it shares)."""
        placed = self.allocate(rollout[0], rollout[1])
        training_gpus = self.allocate(training[0], training[1], rollout[1] if training_after_rollout else 0)
        placed += training_gpus
        own: list[tuple[GPU, ...]] = []
        for role in (critic, reference, reward, prefill):
            gpus: tuple[GPU, ...] = ()
            if role is not None:
                gpus = self.allocate(role[0], role[1], len({g for g in placed if g.pool == role[0]}))
                placed += gpus
            own.append(gpus)
        return RoleGPUs(placed[:rollout[1]], training_gpus, own[2], own[0], own[1], own[3])

    def domain(self, gpu: GPU) -> tuple[str, int]:
        """The scale-up domain a GPU belongs to, as (pool, index)."""
        return gpu.pool, self._layout(gpu.pool).domain(gpu)

    def rail(self, gpu: GPU) -> int | None:
        """Index of the NIC a GPU reaches directly in its node, or None when its pool has no scale-out network."""
        layout = self._layout(gpu.pool)
        return layout.rail(gpu) if layout.nics_per_node else None

    # ---- questions --------------------------------------------------------------------------------------------

    def transfer(self, src: Sequence[GPU], dst: Sequence[GPU], efficiency: Mapping[str, float] | None = None) -> Path:
        """Bandwidth and latency for moving data from the GPU set `src` to the GPU set `dst`.

        Each link counts at its spec capacity times `efficiency[scope]` (1 for a scope left out). GPUs in both sets
        need no transfer: the path is infinitely fast.
        """
        sources, sinks = frozenset(src), frozenset(dst)
        if not sources or not sinks:
            raise ValueError("transfer needs at least one source and one destination GPU")
        for gpu in sources | sinks:
            self._check(gpu)
        if sources & sinks:
            return Path(math.inf, 0.0, frozenset())
        factors = dict(efficiency or {})
        key = (sources, sinks, tuple(sorted(factors.items())))
        if key not in self._flows:
            self._flows[key] = self._transfer(sources, sinks, factors)
        return self._flows[key]

    def group(self, gpus: Iterable[GPU], alongside: Iterable[GPU] = ()) -> CommGroup:
        """What a communicator over `gpus` can use; see CommGroup. `alongside`: GPUs that run the same collective in
        communicators of their own at the same time (the other tensor-parallel ranks' data-parallel groups), whose
        traffic shares a NIC rail with this group's members where a node has fewer rails than GPUs: each rail's
        bandwidth is split among the GPUs sending through it."""
        members = tuple(sorted(set(gpus)))
        if not members:
            raise ValueError("a communicator needs at least one GPU")
        for gpu in members:
            self._check(gpu)
        per_domain = Counter(self.domain(g) for g in members)
        layouts = {g.pool: self._layout(g.pool) for g in members}
        scale_up = min((lay.hardware.intra_node for lay in layouts.values()), key=lambda link: link.bytes_per_s)
        up_rates = [_domain_rate(layouts[pool], count) for (pool, _), count in per_domain.items()]
        rails: dict[DomainKey, set[RailKey]] = defaultdict(set)
        for gpu in members:
            if layouts[gpu.pool].nics_per_node:
                rails[self.domain(gpu)].add((gpu.node, layouts[gpu.pool].rail(gpu)))
        shares = self._rail_shares(members, alongside)
        links = [lay.hardware.inter_node for lay in layouts.values()
                 if lay.nics_per_node and lay.hardware.inter_node is not None]
        scale_out = min(links, key=lambda link: link.bytes_per_s) if links and len(links) == len(layouts) else None
        if len(per_domain) > 1 and scale_out is None:
            raise ValueError("the GPUs span scale-up domains but some have no scale-out network to reach each other")
        out_total = out_per_gpu = 0.0
        nics = 0
        if scale_out is not None:
            per_rail = {pool: min(scale_out.bytes_per_s, lay.hardware.host_link.bytes_per_s) for pool, lay in layouts.items()}
            totals = {d: sum(shares[d, rail] for rail in rails[d]) * per_rail[d[0]] for d in per_domain}
            out_total = min(totals.values())
            out_per_gpu = min(totals[d] / per_domain[d] for d in per_domain)
            nics = min(len(rails[d]) for d in per_domain)
        return CommGroup(
            gpus=members,
            domains=len(per_domain),
            nodes=len({(g.pool, g.node) for g in members}),
            gpus_per_domain=max(per_domain.values()),
            scale_up=scale_up,
            scale_up_bytes_per_s=min(up_rates),
            scale_out=scale_out,
            nics_per_domain=nics,
            scale_out_bytes_per_s=out_total,
            scale_out_bytes_per_s_per_gpu=out_per_gpu,
            in_network_reduction=len(per_domain) == 1 and scale_up.reduces_in_network,
        )

    # ---- internals --------------------------------------------------------------------------------------------

    def _rail_shares(self, members: tuple[GPU, ...], alongside: Iterable[GPU]) -> dict[tuple[DomainKey, RailKey], float]:
        """The share of each NIC rail the members drive that is theirs: members on the rail over every GPU sending
        through it at once (members and `alongside`), by (domain, (node, rail))."""
        own: Counter[tuple[DomainKey, RailKey]] = Counter()
        busy: Counter[tuple[DomainKey, RailKey]] = Counter()
        member_set = set(members)
        for gpu in member_set | set(alongside):
            layout = self._layout(gpu.pool)
            if not layout.nics_per_node:
                continue
            key = (self.domain(gpu), (gpu.node, layout.rail(gpu)))
            busy[key] += 1
            if gpu in member_set:
                own[key] += 1
        return {key: own[key] / busy[key] for key in own}

    def _layout(self, pool: str) -> _PoolLayout:
        try:
            return self.layouts[pool]
        except KeyError:
            raise KeyError(f"no pool named {pool!r}; pools: {', '.join(self.layouts)}") from None

    def _check(self, gpu: GPU) -> None:
        layout = self._layout(gpu.pool)
        if not (0 <= gpu.node < layout.nodes and 0 <= gpu.local < layout.gpus_per_node):
            raise ValueError(f"{gpu} is not in pool {gpu.pool!r} ({layout.nodes} nodes of {layout.gpus_per_node} GPUs)")
        if gpu not in self.graph:
            raise ValueError(f"{gpu} is past the nodes wired for the scenario's roles in pool {gpu.pool!r}")

    @cached_property
    def _latency_graphs(self) -> dict[bool, nx.DiGraph]:
        """Latency-weighted graphs, keyed by whether the transfer stays in one domain (then the NICs are left out)."""
        return {
            local: nx.DiGraph(
                (u, v, {"latency": d["latency"]})
                for u, v, d in self.graph.edges(data=True)
                if not (local and d["scope"] == "scale_out")
            )
            for local in (False, True)
        }

    def _transfer(self, sources: frozenset[GPU], sinks: frozenset[GPU], factors: Mapping[str, float]) -> Path:
        # Inside one scale-up domain NCCL never detours through the NICs (a NIC loop-back would add their bandwidth).
        local = len({self.domain(g) for g in sources | sinks}) == 1
        flow_graph = nx.DiGraph()
        for u, v, data in self.graph.edges(data=True):
            if local and data["scope"] == "scale_out":
                continue
            attrs = {"scope": data["scope"]}
            if "capacity" in data:  # no capacity = unbounded (the non-blocking fabric core)
                attrs["capacity"] = data["capacity"] * factors.get(data["scope"], 1.0)
            flow_graph.add_edge(u, v, **attrs)
        flow_graph.add_edges_from((_SOURCE, s) for s in sources)
        flow_graph.add_edges_from((_rx(d), _SINK) for d in sinks)
        rate, (reachable, _) = nx.minimum_cut(flow_graph, _SOURCE, _SINK)
        if rate <= 0:
            raise ValueError("no route between the GPU sets")
        cut_scopes = frozenset(
            d["scope"] for u, v, d in flow_graph.edges(data=True) if u in reachable and v not in reachable and "scope" in d
        )
        latency = 0.0
        for source in sources:
            reach = nx.single_source_dijkstra_path_length(self._latency_graphs[local], source, weight="latency")
            latency = max(latency, min(reach.get(_rx(d), math.inf) for d in sinks))
        return Path(bytes_per_s=rate, latency_s=latency, scopes=cut_scopes)


def _layout(hw: PoolHardware) -> _PoolLayout:
    pool = hw.pool
    if pool.gpus_per_node is None:
        raise ValueError(f"pool {pool.name!r} is not resolved; load scenarios with rlsim.config.load_scenario")
    profile_nics = hw.gpu.node.nics_per_node.value if hw.gpu.node.nics_per_node else None
    nics = (pool.nics_per_node or profile_nics or pool.gpus_per_node) if hw.inter_node is not None else 0
    scale_up = hw.gpu.scale_up
    domain = scale_up.domain_gpus.value if scale_up is not None else pool.gpus_per_node
    if domain % pool.gpus_per_node and pool.gpus_per_node % domain:
        raise ValueError(f"pool {pool.name!r}: {pool.gpus_per_node} GPUs per node do not tile scale-up domains of {domain}")
    return _PoolLayout(hardware=hw, nodes=pool.nodes, gpus_per_node=pool.gpus_per_node, nics_per_node=nics,
                       domain_gpus=domain)


def _domain_rate(layout: _PoolLayout, members: int) -> float:
    """Per-GPU scale-up bandwidth toward the other `members` of a domain: a mesh only has the links to them."""
    link = layout.hardware.intra_node
    if layout.mesh and members > 1:
        return min(link.bytes_per_s, (members - 1) * link.peer_bytes_per_s)
    return link.bytes_per_s


def placed_gpus(bound: Bound) -> dict[str, int]:
    """Per pool, at most how many GPUs from its start the scenario's roles take: the engines, training, a reward
    model and a critic or reference with GPUs of its own each counted whole (colocated roles overlap, so this is an
    upper bound on the last GPU used)."""
    placement = bound.scenario.placement
    first = bound.scenario.cluster.pools[0].name
    rollout_pool = placement.rollout.pool or first
    used: dict[str, int] = defaultdict(int)
    used[rollout_pool] += placement.rollout.gpus
    used[placement.training.pool or rollout_pool] += placement.training.gpus or 0
    if placement.reward_model is not None:
        used[placement.reward_model.pool or rollout_pool] += placement.reward_model.gpus or 0
    for pool, gpus in own_gpus(placement):
        used[pool] += gpus
    return dict(used)


def _add_pool(graph: nx.DiGraph, name: str, layout: _PoolLayout, wired_nodes: int) -> None:
    hw = layout.hardware
    up, host = hw.intra_node, hw.host_link
    fabric = ("fabric", name)
    if layout.nics_per_node:
        graph.add_edge(fabric, _CORE, latency=0.0, scope="scale_out")
        graph.add_edge(_CORE, fabric, latency=0.0, scope="scale_out")
    gpus = [GPU(name, n, i) for n in range(wired_nodes) for i in range(layout.gpus_per_node)]
    by_domain: dict[int, list[GPU]] = defaultdict(list)
    for gpu in gpus:
        by_domain[layout.domain(gpu)].append(gpu)
        graph.add_node(gpu)
        if not layout.mesh:
            # On an NVSwitch node a GPU relays what it receives over NVLink to its own NIC (NCCL's PXN); in a
            # point-to-point mesh no GPU forwards its peers' traffic, so a GPU pair gets only its own link.
            graph.add_edge(_rx(gpu), gpu, latency=0.0, scope="relay")
        # Without a scale-up fabric, GPUs of a node talk through the CPU's root complex (one shared host node);
        # with one, host memory is only a source or sink, so each GPU gets its own port and no GPU-to-GPU route
        # runs through host memory.
        port = ("host", name, gpu.node) if hw.gpu.scale_up is None else ("host", name, gpu.node, gpu.local)
        _link(graph, gpu, port, host.bytes_per_s, host.latency_s, host.scope)
        if layout.nics_per_node:
            nic = ("nic", name, gpu.node, layout.rail(gpu))
            # GPUDirect RDMA: the GPU reaches its NIC through its PCIe switch; the NET latency is charged at the NIC.
            _link(graph, gpu, nic, host.bytes_per_s, 0.0, host.scope)
    if layout.nics_per_node:
        link = hw.inter_node
        assert link is not None
        for node in range(wired_nodes):
            for rail in range(layout.nics_per_node):
                _link(graph, ("nic", name, node, rail), fabric, link.bytes_per_s, link.latency_s / 2, link.scope)
    if hw.gpu.scale_up is None:
        return  # GPUs of a node reach each other through their host links only
    for domain, members in by_domain.items():
        if layout.mesh:
            for a in members:
                for b in members:
                    if a < b:
                        _link(graph, a, b, up.peer_bytes_per_s, up.latency_s, up.scope)
        else:
            switch = ("switch", name, domain)
            for gpu in members:
                _link(graph, gpu, switch, up.bytes_per_s, up.latency_s / 2, up.scope)


def _link(graph: nx.DiGraph, a: object, b: object, capacity: float, latency: float, scope: str) -> None:
    """One full-duplex link: an edge each way with the per-direction capacity; traffic into a GPU lands on its rx port."""
    graph.add_edge(a, _rx(b), capacity=capacity, latency=latency, scope=scope)
    graph.add_edge(b, _rx(a), capacity=capacity, latency=latency, scope=scope)


def _rx(node: object) -> object:
    return ("rx", node) if isinstance(node, GPU) else node
