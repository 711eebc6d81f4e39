"""The cluster graph: placement of roles on GPUs, transfer bandwidth between GPU sets, and communicator descriptions."""
from functools import cache

import pytest

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.topology import GPU, ClusterTopology

SCENARIO = """
name: topology-test
cluster:
  pools:
{pools}
model: Qwen2.5-7B
algorithm: {{name: grpo, prompts_per_step: 32, samples_per_prompt: 8, max_prompt_tokens: 1024, max_response_tokens: 4096}}
workload:
  prompt_tokens: {{kind: lognormal, median_tokens: 200, sigma: 0.5}}
  response_tokens: {{kind: lognormal, median_tokens: 1000, sigma: 0.8}}
  reward: {{kind: rule, cpu_seconds_per_sample: 0.01, workers: 16}}
placement:
  mode: disaggregated
  rollout: {{gpus: 4, pool: {first}}}
  training: {{gpus: 4, pool: {last}}}
schedule: {{mode: one_step_off}}
"""


@cache
def topology(*pools: tuple[str, str, int]) -> ClusterTopology:
    """A cluster of pools given as (name, GPU profile, nodes), every node wired (these tests probe links anywhere,
    not a placement's); built once per test session."""
    lines = "\n".join(f"    - {{name: {name}, gpu: {gpu}, nodes: {nodes}}}" for name, gpu, nodes in pools)
    text = SCENARIO.format(pools=lines, first=pools[0][0], last=pools[-1][0])
    return ClusterTopology.from_pools(bind(parse_scenario(text)).pools)


@pytest.fixture(scope="module")
def h100() -> ClusterTopology:
    return topology(("main", "h100-sxm", 4))


def test_gpus_are_ordered_and_hashable(h100):
    gpus = h100.gpus("main")
    assert len(gpus) == 32
    assert gpus == sorted(gpus)
    assert gpus[9] == GPU("main", 1, 1)
    assert len(set(gpus)) == 32
    assert str(gpus[9]) == "main/node1/gpu1"


def test_allocate_fills_nodes_in_order(h100):
    # "the 8 training GPUs after the 24 rollout GPUs" start on the fourth node.
    training = h100.allocate("main", 8, offset=24)
    assert training == tuple(GPU("main", 3, i) for i in range(8))
    assert h100.allocate("main", 3) == (GPU("main", 0, 0), GPU("main", 0, 1), GPU("main", 0, 2))
    with pytest.raises(ValueError, match="32 GPUs"):
        h100.allocate("main", 9, offset=24)
    with pytest.raises(KeyError, match="no pool named"):
        h100.gpus("other")


def test_transfer_inside_a_node_is_nvlink(h100):
    a, b = GPU("main", 0, 0), GPU("main", 0, 5)
    path = h100.transfer([a], [b])
    assert path.bytes_per_s == pytest.approx(450e9)  # NVLink 4; no detour through the NICs or host memory
    assert path.latency_s == pytest.approx(1.9e-6)
    assert path.scopes == {"scale_up"}
    scaled = h100.transfer([a], [b], efficiency={"scale_up": 0.5})
    assert scaled.bytes_per_s == pytest.approx(225e9)


def test_transfer_between_nodes_uses_every_rail(h100):
    node0, node1 = h100.allocate("main", 8), h100.allocate("main", 8, offset=8)
    path = h100.transfer(node0, node1)
    assert path.bytes_per_s == pytest.approx(8 * 50e9)  # 8 NDR rails in parallel
    assert path.latency_s == pytest.approx(2.7e-6)
    assert path.scopes == {"scale_out"}
    one = h100.transfer(node0[:1], node1[:1])
    # One GPU to one GPU on another node: its own rail, and PXN through peers' NICs adds 7 more routes.
    assert one.bytes_per_s == pytest.approx(8 * 50e9)
    assert one.seconds(400e9) == pytest.approx(1.0 + 2.7e-6)
    assert one.seconds(0) == 0.0


def test_transfer_into_one_gpu_is_bounded_by_its_node(h100):
    many = h100.allocate("main", 24, offset=8)
    # From other nodes: all 8 NICs of the receiver's node, relayed to it over NVLink (under NVLink + its own PCIe).
    assert h100.transfer(many, [GPU("main", 0, 0)]).bytes_per_s == pytest.approx(400e9)
    # From its own node: its NVLink port; host memory is never a relay.
    assert h100.transfer(h100.allocate("main", 7, 1), [GPU("main", 0, 0)]).bytes_per_s == pytest.approx(450e9)


def test_overlapping_sets_need_no_transfer(h100):
    gpus = h100.allocate("main", 2)
    assert h100.transfer(gpus, gpus[1:]).bytes_per_s == float("inf")


def test_group_inside_and_across_nodes(h100):
    node = h100.group(h100.allocate("main", 8))
    assert (node.size, node.domains, node.nodes, node.gpus_per_domain) == (8, 1, 1, 8)
    assert node.scale_up.name == "nvlink4"
    assert node.in_network_reduction  # NVSwitch gen 3 has NVLS
    wide = h100.group(h100.gpus("main"))
    assert (wide.domains, wide.gpus_per_domain, wide.nics_per_domain) == (4, 8, 8)
    assert wide.scale_out is not None and wide.scale_out.name == "ib-ndr"
    assert wide.scale_out_bytes_per_s == pytest.approx(400e9)
    assert wide.scale_out_bytes_per_s_per_gpu == pytest.approx(50e9)
    assert not wide.in_network_reduction
    half = h100.group([*h100.allocate("main", 4), *h100.allocate("main", 4, offset=8)])
    assert half.nics_per_domain == 4  # only the members' rails
    assert half.scale_out_bytes_per_s == pytest.approx(200e9)


def test_communicators_running_at_once_share_a_rail_a_node_has_fewer_of_than_gpus():
    """HybridFlow's testbed (arXiv 2409.19256 §8.1): A100 nodes joined by 200 Gb/s per machine, one rail for eight
    GPUs. A data-parallel group of one GPU per node alone has the rail; with the other seven GPUs of each node reducing
    in groups of their own at the same time, it gets an eighth. With one rail per GPU (the profile's eight), the
    others use rails of their own and nothing changes."""
    lines = "    - {name: main, gpu: a100-80gb-sxm, nodes: 2, nics_per_node: 1}"
    shared = ClusterTopology.from_pools(bind(parse_scenario(SCENARIO.format(pools=lines, first="main",
                                                                            last="main"))).pools)
    gpus = shared.gpus("main")
    ring = [gpus[0], gpus[8]]  # tensor-parallel rank 0's data-parallel group across the two nodes
    alone = shared.group(ring)
    assert alone.nics_per_domain == 1 and alone.scale_out_bytes_per_s == pytest.approx(25e9)
    crowded = shared.group(ring, alongside=gpus)
    assert crowded.scale_out_bytes_per_s == pytest.approx(25e9 / 8)
    assert crowded.scale_out_bytes_per_s_per_gpu == pytest.approx(25e9 / 8)
    pair = shared.group([gpus[0], gpus[1], gpus[8], gpus[9]], alongside=gpus)  # two members per node on the rail
    assert pair.scale_out_bytes_per_s == pytest.approx(2 * 25e9 / 8)
    own_rails = topology(("main", "a100-80gb-sxm", 2))
    every = own_rails.gpus("main")
    assert own_rails.group([every[0], every[8]], alongside=every) == own_rails.group([every[0], every[8]])


def test_mi300x_mesh_gives_a_pair_one_link():
    topo = topology(("main", "mi300x", 1))
    gpus = topo.gpus("main")
    assert topo.transfer(gpus[:1], gpus[1:2]).bytes_per_s == pytest.approx(64e9)
    assert topo.transfer(gpus[:4], gpus[4:]).bytes_per_s == pytest.approx(16 * 64e9)
    assert topo.group(gpus[:2]).scale_up_bytes_per_s == pytest.approx(64e9)
    assert topo.group(gpus).scale_up_bytes_per_s == pytest.approx(448e9)
    assert not topo.group(gpus).in_network_reduction


def test_nvl72_domain_spans_compute_trays():
    topo = topology(("main", "gb200", 36))  # two NVL72 racks of 18 four-GPU trays
    gpus = topo.gpus("main")
    assert topo.domain(gpus[0]) == topo.domain(gpus[71]) != topo.domain(gpus[72])
    path = topo.transfer([gpus[0]], [gpus[70]])  # different trays, same rack: NVLink
    assert path.bytes_per_s == pytest.approx(900e9) and path.scopes == {"scale_up"}
    rack = topo.group(gpus[:72])
    assert (rack.domains, rack.nodes, rack.in_network_reduction) == (1, 18, True)
    both = topo.group(gpus)
    assert (both.domains, both.gpus_per_domain, both.nics_per_domain) == (2, 72, 72)
    assert both.scale_out_bytes_per_s_per_gpu == pytest.approx(50e9)


def test_pcie_only_gpus_talk_through_the_host():
    topo = topology(("main", "l40s", 1))
    gpus = topo.gpus("main")
    assert topo.transfer(gpus[:1], gpus[1:2]).bytes_per_s == pytest.approx(31e9)
    group = topo.group(gpus)
    assert group.scale_up.name == "pcie4" and group.scale_out is None


def test_pools_are_joined_through_the_fabric():
    topo = topology(("gen", "h20", 2), ("train", "h800-sxm", 1))
    path = topo.transfer(topo.gpus("train"), topo.gpus("gen"))
    assert path.bytes_per_s == pytest.approx(8 * 50e9)
    group = topo.group([*topo.allocate("gen", 8), *topo.allocate("train", 8)])
    assert group.domains == 2
    assert group.scale_up.name == "nvlink-h800"  # the slower pool sets the pace


def test_a_scenario_wires_only_the_nodes_its_roles_use():
    """A pool of 1,000 nodes where the placement takes one: its GPUs are all counted, its links built for one node
    (the graph of 100,000 nodes took a minute), and a GPU past the wired nodes is refused, not silently unlinked."""
    lines = "    - {name: main, gpu: h100-sxm, nodes: 1000}"
    bound = bind(parse_scenario(SCENARIO.format(pools=lines, first="main", last="main")))
    wired = ClusterTopology.build(bound)
    assert len(wired.gpus("main")) == 8000
    assert wired.graph.number_of_nodes() * 500 < ClusterTopology.from_pools(bound.pools).graph.number_of_nodes()
    with pytest.raises(ValueError, match="past the nodes wired"):
        wired.transfer(wired.gpus("main")[:1], [wired.gpus("main")[-1]])
