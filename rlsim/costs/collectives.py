"""Time of NCCL-style collectives on a communicator, from link specs, α-β formulas and NCCL's protocol model.

`collective_time(op, nbytes, group)` tries every algorithm the group allows — a flat ring, a tree, the hierarchical
all-reduce (reduce-scatter in each domain, all-reduce of 1/g of the data across domains on all NICs at once,
all-gather in each domain) and NVLS in-switch reduction — under each protocol (LL, LL128, Simple), and returns the
fastest, as NCCL's tuner does. `nbytes` is the per-rank buffer nccl-tests reports as "size": the whole buffer of an
all-reduce, broadcast or send; the gathered output of an all-gather; the input of a reduce-scatter; the send buffer of
an all-to-all (1/n of it to each peer).

Each algorithm is t = latency + bytes on the busiest link / its achievable bandwidth (reference §3). Achievable
bandwidth is the link spec times an efficiency constant below; the measured bus bandwidths stored in the hardware
profiles are what the tests compare against, never an input. The per-step latency α of a link is its profile's
`latency_us` (a measured small-message figure for scale-up links, NCCL's per-hop figure for NICs and PCIe); the
larger protocols add NCCL's extra per-hop latency. Multi-stage algorithms pipeline their stages through chunks, so
their bandwidth term is that of the slowest stage, not the sum.

A calibrated link (its profile's `calibration:` block, written by `rlsim calibrate fit`) holds curves measured for
some (op, ranks, nodes). A group that matches one — inside one domain the scale-up link's curves, across domains the
NIC's — is timed by it in place of the model above, unless the caller restricts the protocols (the measurement let
NCCL choose): inside the measured sizes by log-log interpolation between the measured points, which keeps the knee
where protocols and algorithms change (reference §6: "keep the table for the 1–64 MB knee"); outside them by the
fitted α–β line, t = α + nbytes·busbw_factor/busbw.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from rlsim.hardware import CollectiveCurve, Interconnect
from rlsim.topology import CommGroup

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"]
OPS: tuple[Op, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")

# ---- achievable fractions of link specs ---------------------------------------------------------------------

# NCCL collectives reach ~80% of a scale-up link's unidirectional spec: stas00/ml-engineering network/README.md
# ("Unidirectional vs Bidirectional": nccl-tests all-reduce on A100 gives 80% of 300 GBps "which is expected"; its
# 16 GiB ring sweep: A100 78%, H200 with NVLS off 82%; 8x B200 with NVLS off: 682 of 900 = 76%). The same rule is
# used for GPUs whose node peers talk over PCIe.
COLLECTIVE_EFFICIENCY = 0.80
# Per-GPU NIC throughput inside an inter-node all-reduce: 73-74% of wire rate (hardware-and-costs.md §2, from
# stas00/ml-engineering network/README.md "Inter-node speed depends on intra-node speed": 4x8 B200, 377 GBps busbw
# x (k-1)/(n-1) = 36.5 GBps per 50 GBps NIC). Used for every NIC transfer, a conservative floor for plain RDMA copies.
NIC_EFFICIENCY = 0.73
# A bulk copy over NVLink reaches 88% of spec (hardware-and-costs.md §2: nvbandwidth device_to_device_memcpy_write_ce
# on 8x H200, 396.4 of 450 GBps; the nvlink4 profile's measured copy_gbyte_per_s).
SCALE_UP_COPY_EFFICIENCY = 0.88
# Host<->device copies: the profiles' measured host_to_device over their PCIe spec: A100 26.28/31 = 0.85,
# H100 51/63 = 0.81, H200 52/63 = 0.83, MI300X 55/63 = 0.87 (Azure/AI-benchmarking-guide); nvbandwidth on H200 55.43/63
# = 0.88 (pcie5 profile). The median, 0.83, is used. GB200's NVLink-C2C (201 of a 450 estimate) is an outlier.
HOST_LINK_EFFICIENCY = 0.83

COLLECTIVE_LINK_EFFICIENCY = {"scale_up": COLLECTIVE_EFFICIENCY, "host": COLLECTIVE_EFFICIENCY, "scale_out": NIC_EFFICIENCY}
COPY_LINK_EFFICIENCY = {"scale_up": SCALE_UP_COPY_EFFICIENCY, "host": HOST_LINK_EFFICIENCY, "scale_out": NIC_EFFICIENCY}

# ---- NCCL's protocol and NVLS model (NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults) ---------------


@dataclass(frozen=True)
class Protocol:
    """One NCCL wire protocol: the fraction of link bandwidth it delivers and the latency it adds over LL."""

    name: str
    bandwidth_fraction: float
    extra_base_s: float  # added once per collective (ring base latency minus LL's)
    extra_hop_s: dict[str, float]  # added per step, by link scope (per-hop hardware latency minus LL's)


# LL sends 8-byte stores holding 4 data bytes and a flag (tuning.cc: ring LL busBw * 0.5); LL128 uses 120 of 128 bytes
# (busBw * 0.92); Simple uses the full link but pays more per hop. Per-hop latencies (NVLink / PCI / NET, ring):
# LL 0.6 / 1.0 / 2.7 us, LL128 1.9 / 2.5 / 4.0, Simple 3.4 / 5.7 / 14.0; base latencies LL 6.6, LL128 14.0, Simple 8.4.
# The profiles' α already holds the LL figure (or a measured small-message equivalent), so only the differences are added.
PROTOCOLS: dict[str, Protocol] = {
    "ll": Protocol("ll", 0.5, 0.0, {"scale_up": 0.0, "host": 0.0, "scale_out": 0.0}),
    "ll128": Protocol("ll128", 0.92, 7.4e-6, {"scale_up": 1.3e-6, "host": 1.5e-6, "scale_out": 1.3e-6}),
    "simple": Protocol("simple", 1.0, 1.8e-6, {"scale_up": 2.8e-6, "host": 4.7e-6, "scale_out": 11.3e-6}),
}
# NCCL's tree all-reduce delivers 92% of the ring's bus bandwidth (tuning.cc: tree busBw * .92).
TREE_BANDWIDTH_FACTOR = 0.92
# NVLS (NVLink SHARP) latency: tuning.cc hwLatencies NVLINK, NVLS/Simple = 25 us, with no base latency.
NVLS_LATENCY_S = 25e-6
# NVLS reaches this fraction of the rate other collectives achieve on the same links (tuning.cc nvlsEfficiency:
# Hopper 0.85 for NVLink 4 / NVSwitch gen 3, Blackwell 0.74 for NVLink 5). It multiplies the link bandwidth that
# already carries COLLECTIVE_LINK_EFFICIENCY, so Hopper NVLS runs at 0.80 × 0.85 = 0.68 of spec, which reproduces the
# measured 479 GB/s. Other in-network-reducing fabrics get the lower figure.
NVLS_EFFICIENCY = {"nvlink4": 0.85, "nvlink5": 0.74}
NVLS_DEFAULT_EFFICIENCY = 0.74
# NCCL uses NVLS only above 4 GPUs: NVIDIA GB200 NVL Partition User Guide ("partitions that have less than or equal to
# four GPUs will not benefit from multicast"); stas00/ml-engineering network/README.md SHARP sweep (H200: NVLS from 5).
NVLS_MIN_GPUS = 5


@dataclass(frozen=True)
class CollectiveCost:
    """Time of one collective, the algorithm and protocol that give it, and nccl-tests' bus bandwidth (bytes/s)."""

    seconds: float
    algorithm: str  # ring | tree | hierarchical | nvls | direct (all-to-all, send/recv) | local (one rank) | calibrated
    protocol: str  # ll | ll128 | simple | none | measured (NCCL's own choice, in a calibration)
    bus_bandwidth: float


def bus_factor(op: Op, ranks: int) -> float:
    """nccl-tests' busbw = algbw x this factor (NVIDIA/nccl-tests doc/PERFORMANCE.md; reference §3)."""
    n = ranks
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}; one of {', '.join(OPS)}")


def collective_time(op: Op, nbytes: float, group: CommGroup, *, protocols: Iterable[str] = tuple(PROTOCOLS)) -> CollectiveCost:
    """The fastest algorithm and protocol for `op` on `group` moving `nbytes` (nccl-tests size), see module doc.

    `protocols` restricts the protocols, as NCCL_PROTO does (e.g. ("simple",) where the network cannot order bytes).
    """
    factor = bus_factor(op, max(group.size, 2))
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if group.size == 1 or nbytes == 0:
        return CollectiveCost(0.0, "local", "none", math.inf)
    if op == "send_recv" and group.size != 2:
        raise ValueError(f"send_recv is between two GPUs; the group has {group.size}")
    chosen = [PROTOCOLS[p] for p in protocols]
    if not chosen:
        raise ValueError("no protocol allowed")
    measured = _calibrated(op, nbytes, group) if set(protocols) >= set(PROTOCOLS) else None
    if measured is not None:
        return measured
    links = _Links.of(group)
    candidates = [c for proto in chosen for c in _candidates(op, nbytes, group, links, proto)]
    if op == "all_reduce" and "simple" in {p.name for p in chosen}:
        candidates += _nvls(nbytes, group, links)
    seconds, algorithm, protocol = min(candidates)
    return CollectiveCost(seconds, algorithm, protocol, nbytes * factor / seconds)


def _calibrated(op: Op, nbytes: float, group: CommGroup) -> CollectiveCost | None:
    """The group's time from the calibrated curve for exactly this op, rank count and node count, if there is one."""
    link = group.scale_up if group.domains == 1 else group.scale_out
    if link is None or link.calibration is None:
        return None
    curve = link.calibration.curve(op, group.size, group.nodes)
    if curve is None:
        return None
    factor = bus_factor(op, group.size)
    seconds = measured_seconds(curve, nbytes * factor)
    return CollectiveCost(seconds, "calibrated", "measured", nbytes * factor / seconds)


def measured_seconds(curve: CollectiveCurve, size: float) -> float:
    """A calibrated collective's time at `size` (bytes × bus factor): log-log interpolation between the measured
    points inside their range; outside it the nearest point scaled by the α–β fit, so the curve stays continuous."""

    def alpha_beta(x: float) -> float:
        return curve.fixed_us.value * 1e-6 + x / (curve.busbw_gbyte_per_s.value * 1e9)

    points = sorted((p.size, p.value) for p in curve.points)
    at = bisect.bisect_left(points, (size, 0.0))
    if at == len(points) or (at == 0 and points[0][0] > size):
        edge_size, edge_seconds = points[-1] if at else points[0]
        return edge_seconds * alpha_beta(size) / alpha_beta(edge_size)
    (x0, t0), (x1, t1) = points[max(at - 1, 0)], points[at]
    if x1 == x0:
        return t1
    return t0 * (t1 / t0) ** (math.log(size / x0) / math.log(x1 / x0))


@dataclass(frozen=True)
class _Links:
    """Achievable per-GPU bandwidths and per-step latencies of a group."""

    up_scope: str
    up_bw: float  # toward domain peers
    up_alpha: float
    out_alpha: float
    domain_out_bw: float  # a domain's NICs together
    gpu_out_bw: float  # one GPU's share of them

    @classmethod
    def of(cls, group: CommGroup) -> _Links:
        up: Interconnect = group.scale_up
        out = group.scale_out
        eff_out = COLLECTIVE_LINK_EFFICIENCY["scale_out"]
        return cls(
            up_scope=up.scope,
            up_bw=group.scale_up_bytes_per_s * COLLECTIVE_LINK_EFFICIENCY[up.scope],
            up_alpha=up.latency_s,
            out_alpha=out.latency_s if out is not None else 0.0,
            domain_out_bw=group.scale_out_bytes_per_s * eff_out,
            gpu_out_bw=group.scale_out_bytes_per_s_per_gpu * eff_out,
        )

    def hops(self, proto: Protocol, intra: float, inter: float) -> float:
        """Latency of `intra` scale-up steps and `inter` NIC steps, plus the protocol's base latency."""
        return (
            proto.extra_base_s
            + intra * (self.up_alpha + proto.extra_hop_s[self.up_scope])
            + inter * (self.out_alpha + proto.extra_hop_s["scale_out"])
        )


def _candidates(op: Op, s: float, group: CommGroup, links: _Links, proto: Protocol) -> list[tuple[float, str, str]]:
    n, k, g = group.size, group.domains, group.gpus_per_domain
    frac = proto.bandwidth_fraction
    up = links.up_bw * frac
    # A flat ring enters and leaves each domain once per ring; NCCL runs one ring per NIC rail, so the domain's
    # rails carry the ring's traffic together (stas00 network/README.md, "a flat ring across all n ranks").
    ring_bw = up if k == 1 else min(up, links.domain_out_bw * frac)
    out_gpu = links.gpu_out_bw * frac
    name = proto.name
    if op == "all_reduce":
        steps, cross = 2 * (n - 1), 2 * (k - 1)
        found = [(links.hops(proto, steps - cross, cross) + 2 * (n - 1) / n * s / ring_bw, "ring", name)]
        if k > 1:
            log_k = math.ceil(math.log2(k))
            tree = links.hops(proto, 2 * (g - 1), 2 * log_k) + 2 * s / (ring_bw * TREE_BANDWIDTH_FACTOR)
            inter_steps = min(2 * (k - 1), 2 * log_k)  # the cross-domain all-reduce as a ring or a tree
            hier_bw = max(2 * (g - 1) / g * s / up, 2 * (k - 1) / k * (s / g) / out_gpu)
            hier = links.hops(proto, 2 * (g - 1), inter_steps) + hier_bw
            found += [(tree, "tree", name), (hier, "hierarchical", name)]
        return found
    if op in ("all_gather", "reduce_scatter"):
        return [(links.hops(proto, n - k, k - 1) + (n - 1) / n * s / ring_bw, "ring", name)]
    if op == "broadcast":
        # Pipelined along a ring: every rank receives the whole buffer once.
        return [(links.hops(proto, n - k, k - 1) + s / ring_bw, "ring", name)]
    if op == "all_to_all":
        # Every rank sends 1/n of its buffer to each peer at once: the domain peers' share over the scale-up links,
        # the rest over this GPU's share of the NICs, concurrently.
        local = (g - 1) / n * s / up
        remote = (n - g) / n * s / out_gpu if k > 1 else 0.0
        return [(links.hops(proto, g - 1, n - g) + max(local, remote), "direct", name)]
    if op == "send_recv":
        if k == 1:
            return [(links.hops(proto, 1, 0) + s / up, "direct", name)]
        return [(links.hops(proto, 0, 1) + s / (links.domain_out_bw * frac), "direct", name)]
    raise ValueError(f"unknown collective {op!r}; one of {', '.join(OPS)}")


def _nvls(s: float, group: CommGroup, links: _Links) -> list[tuple[float, str, str]]:
    """NVLink SHARP all-reduce inside one domain.

    Each GPU reduces 1/n of the buffer in the switch (multimem load-reduce: its whole buffer leaves once) and
    multicasts the result (the whole result arrives once), so each direction carries (1 + 1/n)·S against the ring's
    2(n-1)/n·S.
    """
    if not group.in_network_reduction or group.size < NVLS_MIN_GPUS:
        return []
    n = group.size
    efficiency = NVLS_EFFICIENCY.get(group.scale_up.name, NVLS_DEFAULT_EFFICIENCY)
    return [(NVLS_LATENCY_S + (1 + 1 / n) * s / (links.up_bw * efficiency), "nvls", "simple")]
