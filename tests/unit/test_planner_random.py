"""Random strongly connected topologies: every plan verifies and reaches its bound.

Bounds come from the independent brute force in ``planner_bruteforce``; topologies are small
(at most 6 devices, optionally one non-blocking switch) so enumeration stays cheap.
"""
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from blinkflow.planner import make_plan
from blinkflow.topology import Link, Node, Topology, bidirectional

from planner_bruteforce import allgather_bound, allreduce_bound, broadcast_bound, graph_of

REL = 1e-6


@st.composite
def meshes(draw):
    """Devices joined by NVLink bundles of random width in a connected random pattern
    (asymmetric capacities too)."""
    n = draw(st.integers(2, 6))
    links = []
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=n - 1, max_size=len(pairs), unique=True))
    for a in range(1, n):  # a random spanning tree keeps it connected
        chosen.append((draw(st.integers(0, a - 1)), a))
    for a, b in sorted(set(chosen)):
        fwd = draw(st.integers(1, 4))
        back = draw(st.sampled_from([fwd, draw(st.integers(1, 4))]))
        links.append(Link(a, b, "nvlink", fwd, 25.0 * fwd / draw(st.sampled_from([1, 1, 2, 3]))))
        links.append(Link(b, a, "nvlink", back, 25.0 * back))
    return Topology.build("random", [Node(i, "gpu") for i in range(n)], links)


@st.composite
def stars(draw):
    n = draw(st.integers(2, 5))
    nodes = [Node(i, "gpu") for i in range(n)] + [Node("sw", "switch", detail="nvswitch")]
    links = []
    for i in range(n):
        links += bidirectional(i, "sw", "nvswitch", draw(st.integers(1, 6)), 25.0)
    return Topology.build("star", nodes, links)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(meshes(), st.data())
def test_random_mesh_plans_reach_bounds(topo, data):
    devices = list(topo.compute_ids)
    arcs = graph_of(topo, devices)
    root = data.draw(st.sampled_from(devices))
    bc = make_plan(topo, "broadcast", root=root)
    assert bc.rate_gbps == pytest.approx(float(broadcast_bound(arcs, devices, root)), rel=REL)
    ag = make_plan(topo, "allgather")
    assert ag.rate_gbps == pytest.approx(float(allgather_bound(arcs, devices)), rel=REL)
    ar = make_plan(topo, "allreduce")
    assert ar.rate_gbps == pytest.approx(float(allreduce_bound(arcs, devices)), rel=REL)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stars())
def test_random_switch_plans_reach_bounds(topo):
    check_switch_plans(topo)


def check_switch_plans(topo):
    """Broadcast and all-gather reach the brute-force bounds; all-reduce at least half the
    all-gather rate (the same trees both ways over symmetric links), at most its optimum."""
    devices = list(topo.compute_ids)
    arcs = graph_of(topo, devices)
    bc = make_plan(topo, "broadcast")
    assert bc.rate_gbps == pytest.approx(float(broadcast_bound(arcs, devices, devices[0])), rel=REL)
    ag = make_plan(topo, "allgather")
    assert ag.rate_gbps == pytest.approx(float(allgather_bound(arcs, devices)), rel=REL)
    ar = make_plan(topo, "allreduce")
    assert ag.rate_gbps / 2 * (1 - REL) <= ar.rate_gbps <= ar.optimal_gbps * (1 + REL)


@st.composite
def switch_trees(draw):
    """GPUs behind two or three PCIe switches joined in a chain (a forest of switches), with
    random link widths: the multi-level case edge splitting must handle."""
    n = draw(st.integers(2, 5))
    k = draw(st.integers(2, 3))
    nodes = [Node(i, "gpu") for i in range(n)] + [Node(f"sw{j}", "switch", detail="pcie") for j in range(k)]
    links = []
    for j in range(k - 1):
        links += bidirectional(f"sw{j}", f"sw{j + 1}", "pcie", draw(st.integers(1, 4)), 12.0)
    for i in range(n):
        links += bidirectional(i, f"sw{draw(st.integers(0, k - 1))}", "pcie", draw(st.integers(1, 3)), 12.0)
    return Topology.build("pcie-tree", nodes, links)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(switch_trees())
def test_random_switch_trees_reach_bounds(topo):
    check_switch_plans(topo)
