"""Collective times derived from link specs, checked against the measured bus bandwidths of the hardware profiles and
reference §2 (hardware-and-costs.md), and against hand-computed α-β formulas."""
import math

import pytest

from rlsim.costs.collectives import (
    COLLECTIVE_EFFICIENCY,
    NIC_EFFICIENCY,
    NVLS_LATENCY_S,
    OPS,
    PROTOCOLS,
    bus_factor,
    collective_time,
)
from tests.test_topology import topology

GB = 1e9
GIB = 2**30
KIB = 2**10


def node_group(gpu: str, count: int = 8, nodes: int = 1):
    topo = topology(("main", gpu, max(nodes, 1)))
    return topo.group(topo.allocate("main", count))


def busbw(gpu: str, nbytes: float, count: int = 8) -> float:
    return collective_time("all_reduce", nbytes, node_group(gpu, count)).bus_bandwidth


# (GPU, measured 8-GPU all-reduce busbw range at >= 1 GB in GB/s, tolerance): reference §2 and the profiles' sources.
MEASURED = [
    ("h100-sxm", (479, 479), 0.15),  # NVLS, Azure ND H100 v5
    ("h200-sxm", (480, 482), 0.15),  # NVLS, Azure ND H200 v5 / stas00 16 GiB
    ("a100-80gb-sxm", (232, 235), 0.15),  # ring, Azure ND A100 v4 / stas00
    ("mi300x", (317, 317), 0.15),  # RCCL ring over the xGMI mesh, Azure ND MI300X v5
    ("b200", (741, 846), 0.15),  # NVLS, stas00 P6-B200: 741 at 4 GiB, 846 at 16 GiB
]


@pytest.mark.parametrize(("gpu", "measured", "tolerance"), MEASURED)
def test_large_all_reduce_matches_measured_bus_bandwidth(gpu, measured, tolerance):
    model = busbw(gpu, 1 * GB) / GB
    low, high = measured
    assert low * (1 - tolerance) <= model <= high * (1 + tolerance), f"{gpu}: model {model:.0f} GB/s vs {measured}"


def test_h100_all_reduce_uses_nvls_and_lands_near_479():
    cost = collective_time("all_reduce", 1 * GB, node_group("h100-sxm"))
    assert cost.algorithm == "nvls"
    assert cost.bus_bandwidth / GB == pytest.approx(479, rel=0.15)


def test_gb200_four_gpu_ring_matches_measured():
    # Azure ND GB200 v6: NCCL ring all-reduce on one 4-GPU tray, 8 GB: 679.6 GB/s. Four GPUs are too few for NVLS.
    cost = collective_time("all_reduce", 8 * GB, node_group("gb200", 4, nodes=2))
    assert cost.algorithm == "ring"
    assert cost.bus_bandwidth / GB == pytest.approx(680, rel=0.15)


@pytest.mark.parametrize("nbytes", [1 * KIB, 8 * KIB, 32 * KIB, 64 * KIB])
def test_small_all_reduce_on_8_h100_is_latency_bound(nbytes):
    # Reference §2: ~26 us at 1-8 KB (Azure), 25-40 us at <= 64 KB (Vidur's H100 DGX profile).
    seconds = collective_time("all_reduce", nbytes, node_group("h100-sxm")).seconds
    assert 25e-6 <= seconds <= 40e-6


@pytest.fixture(scope="module")
def b200_4_nodes():
    topo = topology(("main", "b200", 4))
    return topo.group(topo.allocate("main", 8)), topo.group(topo.gpus("main"))


def test_cross_node_all_reduce_is_latency_bound_at_32k(b200_4_nodes):
    intra, cross = b200_4_nodes
    small = collective_time("all_reduce", 32 * KIB, cross)
    inside = collective_time("all_reduce", 32 * KIB, intra)
    assert small.seconds > 1.5 * inside.seconds
    # Almost all of it is latency: a 1-byte all-reduce on the same GPUs costs over 95% as much.
    assert collective_time("all_reduce", 1, cross).seconds > 0.95 * small.seconds


@pytest.mark.xfail(strict=True, reason=(
    "reference §2 reports a ~120x 32 KiB slowdown on 4x8 B200 over AWS EFA; the model gives ~2x on IB NDR with NCCL's "
    "per-hop latencies (hierarchical LL: 49 us vs 25 us NVLS in one node). The EFA figure is not a per-hop latency: "
    "aws-ofi-nccl forces the Simple protocol on EFA, and the same 4-node column takes 6.3 ms at 32 KiB but 0.36-0.46 ms "
    "from 128 KiB to 8 MiB, so first-use connection setup is inside it"))
def test_cross_node_32k_slowdown_is_an_order_of_magnitude(b200_4_nodes):
    intra, cross = b200_4_nodes
    ratio = collective_time("all_reduce", 32 * KIB, cross).seconds / collective_time("all_reduce", 32 * KIB, intra).seconds
    assert ratio >= 10


def test_cross_node_large_all_reduce_is_about_half_of_intra_node(b200_4_nodes):
    intra, cross = b200_4_nodes
    for nbytes in (1 * GIB, 4 * GIB, 16 * GIB):
        inside = collective_time("all_reduce", nbytes, intra).bus_bandwidth
        across = collective_time("all_reduce", nbytes, cross)
        assert across.algorithm == "hierarchical"
        assert 0.4 <= across.bus_bandwidth / inside <= 0.6  # measured 377-382 vs 741-846 GB/s: 0.45-0.51
    across = collective_time("all_reduce", 4 * GIB, cross).bus_bandwidth / GB
    assert across == pytest.approx(377, rel=0.15)


def test_bus_bandwidth_reaches_half_its_maximum_near_16_to_32_mb():
    group = node_group("h100-sxm")
    peak = collective_time("all_reduce", 16 * GIB, group).bus_bandwidth
    sizes = [2**k for k in range(10, 35)]
    half = next(s for s in sizes if collective_time("all_reduce", s, group).bus_bandwidth >= peak / 2)
    # Reference §2: half of the maximum near 16-32 MB. Pure α-β reaches it ~2.5x earlier (6.5 MiB here): NCCL's
    # chunked pipelines ramp more slowly than latency + bytes/bandwidth, which calibration tables capture.
    assert 16e6 / 4 <= half <= 32e6 * 4


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("gpu", "count", "nodes"), [("h100-sxm", 8, 1), ("h100-sxm", 32, 4), ("mi300x", 8, 1),
                                                     ("a100-80gb-sxm", 16, 2), ("l40s", 4, 1), ("gb200", 72, 18)])
def test_time_never_decreases_with_size(op, gpu, count, nodes):
    topo = topology(("main", gpu, nodes))
    gpus = topo.allocate("main", count)
    group = topo.group(gpus[:2] if op == "send_recv" else gpus)
    times = [collective_time(op, 2**k, group).seconds for k in range(0, 36)]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))


def test_ring_all_reduce_matches_hand_computation():
    # 8 x A100, Simple protocol only: t = base + 2(n-1)(α + Simple's extra hop) + 2(n-1)/n · S / (B · efficiency).
    group = node_group("a100-80gb-sxm")
    nbytes = 1 * GB
    simple = PROTOCOLS["simple"]
    alpha = 3.1e-6 + simple.extra_hop_s["scale_up"]
    expected = simple.extra_base_s + 14 * alpha + 14 / 8 * nbytes / (300e9 * COLLECTIVE_EFFICIENCY)
    cost = collective_time("all_reduce", nbytes, group, protocols=("simple",))
    assert (cost.algorithm, cost.protocol) == ("ring", "simple")
    assert cost.seconds == pytest.approx(expected, rel=1e-12)
    assert cost.bus_bandwidth == pytest.approx(14 / 8 * nbytes / expected, rel=1e-12)


def test_all_gather_and_reduce_scatter_match_hand_computation():
    group = node_group("a100-80gb-sxm")
    nbytes = 256e6
    expected = 7 * 3.1e-6 + 7 / 8 * nbytes / (0.5 * 300e9 * COLLECTIVE_EFFICIENCY)  # LL: no extra latency, half rate
    for op in ("all_gather", "reduce_scatter"):
        assert collective_time(op, nbytes, group, protocols=("ll",)).seconds == pytest.approx(expected, rel=1e-12)


def test_hierarchical_all_reduce_matches_hand_computation(b200_4_nodes):
    _, cross = b200_4_nodes
    nbytes = 4 * GIB
    simple = PROTOCOLS["simple"]
    latency = simple.extra_base_s + 14 * (2.7e-6 + simple.extra_hop_s["scale_up"]) + 4 * (2.7e-6 + simple.extra_hop_s[
        "scale_out"])  # 2(g-1) NVLink steps, a 2-level tree over 4 nodes
    intra = 14 / 8 * nbytes / (900e9 * COLLECTIVE_EFFICIENCY)
    inter = 2 * 3 / 4 * (nbytes / 8) / (50e9 * NIC_EFFICIENCY)  # each GPU's 1/8 over its own rail
    cost = collective_time("all_reduce", nbytes, cross, protocols=("simple",))
    assert cost.algorithm == "hierarchical"
    assert cost.seconds == pytest.approx(latency + max(intra, inter), rel=1e-12)


def test_nvls_needs_more_than_four_gpus_and_an_nvls_switch():
    assert collective_time("all_reduce", 1 * GB, node_group("h100-sxm", 4)).algorithm == "ring"
    assert collective_time("all_reduce", 1 * GB, node_group("h100-sxm", 5)).algorithm == "nvls"
    assert collective_time("all_reduce", 1 * GB, node_group("a100-80gb-sxm")).algorithm == "ring"
    tiny = collective_time("all_reduce", 1, node_group("h100-sxm"), protocols=("simple",))
    assert tiny.seconds == pytest.approx(NVLS_LATENCY_S, rel=1e-3)


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == bus_factor("all_to_all", 8) == 7 / 8
    assert bus_factor("broadcast", 8) == bus_factor("send_recv", 2) == 1.0
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor("gather", 8)  # type: ignore[arg-type]


def test_degenerate_groups():
    group = node_group("h100-sxm", 1)
    assert collective_time("all_reduce", 1 * GB, group).seconds == 0.0
    assert collective_time("all_reduce", 0, node_group("h100-sxm")).seconds == 0.0
    with pytest.raises(ValueError, match="two GPUs"):
        collective_time("send_recv", 1 * GB, node_group("h100-sxm"))


def test_send_recv_between_nodes_uses_the_rail_nic():
    topo = topology(("main", "h100-sxm", 2))
    pair = topo.group([topo.gpus("main")[0], topo.gpus("main")[8]])
    cost = collective_time("send_recv", 1 * GB, pair)
    assert cost.bus_bandwidth == pytest.approx(50e9 * NIC_EFFICIENCY, rel=0.01)


def test_all_to_all_across_nodes_is_bounded_by_each_gpu_nic_share():
    topo = topology(("main", "h100-sxm", 2))
    group = topo.group(topo.gpus("main"))
    cost = collective_time("all_to_all", 1 * GB, group)
    remote = 8 / 16 * 1 * GB / (50e9 * NIC_EFFICIENCY)  # half of each rank's buffer goes to the other node
    assert cost.seconds == pytest.approx(remote, rel=0.02)  # plus ~0.15 ms of Simple-protocol latency
    assert not math.isinf(cost.bus_bandwidth)
