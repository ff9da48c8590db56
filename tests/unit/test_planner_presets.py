"""Sanity figures and every preset: NVSwitch boxes, PCIe, CPU hosts, hybrid and multi-host."""
import dataclasses
import json

import pytest

from blinkflow.errors import PlanError, TopologyError
from blinkflow.planner import Plan, link_loads, make_plan, verify_plan
from blinkflow.planner.multihost import one_level_trees
from blinkflow.planner.ring import ring_bandwidth, ring_gbps
from blinkflow.topology import Link, Node, Topology, bidirectional
from blinkflow.topology.presets import get_preset


@pytest.fixture(scope="module")
def dgx1v():
    return get_preset("dgx1-v100")


def test_full_dgx1v_sanity_figures(dgx1v):
    bc = make_plan(dgx1v, "broadcast")
    assert bc.rate_gbps == pytest.approx(150.0) and len(bc.trees) == 6
    assert make_plan(dgx1v, "allgather").rate_gbps == pytest.approx(1200 / 7)
    ar = make_plan(dgx1v, "allreduce")
    assert ar.rate_gbps == pytest.approx(600 / 7)


def test_subset_014_allreduce(dgx1v):
    # GPU 1 has one 25 GB/s NVLink into {0, 4}: it must receive the whole reduced buffer through
    # it, so 25 GB/s is optimal; the §3.2 load model overlaps reduce-scatter and all-gather, so
    # ForestColl's trees reach it too (2·T*(AG), run back to back, would be 18.75).
    ag = make_plan(dgx1v, "allgather", [0, 1, 4])
    assert ag.rate_gbps == pytest.approx(37.5)
    ar = make_plan(dgx1v, "allreduce", [0, 1, 4])
    assert ar.rate_gbps == pytest.approx(25.0)


def test_plan_json_round_trip_and_fields(dgx1v):
    plan = make_plan(dgx1v, "broadcast", [0, 1, 2, 3, 4, 5], root=2)
    d = json.loads(plan.to_json())
    for key in ("topology", "gpus", "collective", "root", "rate_gbps", "optimal_gbps", "ring_gbps",
                "plan_seconds", "trees"):
        assert key in d
    assert d["root"] == 2 and sum(t["fraction"] for t in d["trees"]) == pytest.approx(1.0)
    assert Plan.from_dict(d).digest() == plan.digest()


def test_deterministic(dgx1v):
    assert make_plan(dgx1v, "allreduce", [0, 2, 5, 7]).digest() == make_plan(dgx1v, "allreduce", [0, 2, 5, 7]).digest()


# Expected rates from the cuts. A non-blocking switch with B GB/s per GPU: broadcast B,
# all-gather B·N/(N−1), all-reduce half that. pcie-8gpu: broadcast is held to the 10 GB/s QPI
# between the sockets; in an all-gather each GPU receives 7/8 of the buffer over its 12 GB/s
# PCIe link (96/7), the tightest cut (the QPI cut allows 20, a PCIe switch's 16).
SWITCH_PRESET_RATES = {
    "dgx2": (150.0, 16, 150.0), "dgx-a100": (300.0, 8, 300.0), "hgx-h100": (450.0, 8, 450.0),
    "pcie-8gpu": (10.0, 8, 12.0),
}


@pytest.mark.parametrize("name", sorted(SWITCH_PRESET_RATES))
@pytest.mark.parametrize("collective", ["broadcast", "allgather", "allreduce"])
def test_switch_presets_plan_and_verify(name, collective):
    topo = get_preset(name)
    plan = make_plan(topo, collective)
    verify_plan(plan, topo)
    broadcast, n, per_gpu = SWITCH_PRESET_RATES[name]
    expected = {"broadcast": broadcast, "allgather": per_gpu * n / (n - 1),
                "allreduce": per_gpu * n / (2 * (n - 1))}[collective]
    assert plan.rate_gbps == pytest.approx(expected) and plan.optimal_gbps == pytest.approx(expected)
    assert plan.routes  # no two GPUs share a direct link: every edge is routed through a switch


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_single_switch_allreduce_bound(n):
    nodes = [Node(i, "gpu") for i in range(n)] + [Node("sw", "switch", detail="nvswitch")]
    links = [l for i in range(n) for l in bidirectional(i, "sw", "nvswitch", 4, 25.0)]
    topo = Topology.build("star", nodes, links)
    plan = make_plan(topo, "allreduce")
    assert plan.rate_gbps == pytest.approx(n * 100.0 / (2 * (n - 1)))
    assert make_plan(topo, "allgather").rate_gbps == pytest.approx(n * 100.0 / (n - 1))
    assert make_plan(topo, "broadcast").rate_gbps == pytest.approx(100.0)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_cpu_host_allreduce_is_one_hop_stars(n):
    topo = get_preset(f"cpu-host:{n}")
    plan = make_plan(topo, "allreduce")
    assert sorted(t.root for t in plan.trees) == list(range(n))
    for tree in plan.trees:
        assert tree.fraction == pytest.approx(1 / n)
        assert sorted(tree.edges) == sorted((tree.root, d) for d in range(n) if d != tree.root)


def test_hybrid_adds_pcie_channel(dgx1v):
    main = make_plan(dgx1v, "allreduce", [0, 1, 4])
    hyb = make_plan(dgx1v, "allreduce", [0, 1, 4], hybrid=True)
    assert hyb.rate_gbps > main.rate_gbps
    assert {t.channel for t in hyb.trees} == {"main", "pcie"}
    pcie_links = {(l.src, l.dst) for l in dgx1v.links if l.kind in ("pcie", "qpi")}
    for tree in hyb.trees:
        for a, b in tree.edges:
            route = hyb.route(a, b, tree.channel)
            hops = route.hops() if route else [(a, b)]
            assert all((h in pcie_links) == (tree.channel == "pcie") for h in hops)
    assert make_plan(dgx1v, "broadcast", hybrid=True).rate_gbps > 150.0


def test_nvlink_disconnected_subset_falls_back_to_pcie(dgx1v):
    plan = make_plan(dgx1v, "allreduce", [0, 5])
    assert plan.routes and all("pcie0" in r.path or "cpu0" in r.path for r in plan.routes)


@pytest.mark.parametrize("name", ["2xdgx1-v100", "2xcpu-host:4", "3xdgx-a100"])
def test_multi_host_three_phase(name):
    topo = get_preset(name)
    plan = make_plan(topo, "allreduce")
    assert plan.is_three_phase and len(plan.intra) == len(topo.hosts)
    assert plan.cross[0].start == 0.0 and plan.cross[-1].stop == pytest.approx(1.0)
    hosts = sorted(topo.hosts)
    for group in plan.cross:
        assert sorted(topo.node(d).host for d in group.devices) == hosts
        lo = group.start + 1e-12
        for intra in plan.intra:  # the group member of each host holds this slice after phase 1
            acc = 0.0
            for tree in intra.trees:
                if acc <= lo < acc + tree.fraction:
                    assert tree.root in group.devices
                acc += tree.fraction
    # optimal: min(each host's all-reduce optimum, host uplink cut · H / (2 (H − 1)))
    assert plan.rate_gbps == pytest.approx(plan.optimal_gbps)
    nics = {r.path[i] for g in plan.cross for r in g.plan.routes for i in range(len(r.path)) if "nic" in str(r.path[i])}
    if name != "2xcpu-host:4":
        assert len(nics) > len(topo.hosts)  # several NICs per host in parallel
    assert Plan.from_dict(json.loads(plan.to_json())).digest() == plan.digest()
    # Its one-level view (plan --json's trees) passes the verifier as an ordinary plan.
    trees, routes = one_level_trees(plan)
    verify_plan(dataclasses.replace(plan, trees=trees, routes=routes, intra=(), cross=()), topo)


def test_link_loads_allreduce_counts_both_directions(dgx1v):
    plan = make_plan(dgx1v, "allreduce", [0, 1])
    loads = link_loads(plan, dgx1v)
    assert loads[(0, 1)] == pytest.approx(1.0) and loads[(1, 0)] == pytest.approx(1.0)


def test_bad_inputs_raise_typed_errors(dgx1v):
    with pytest.raises(TopologyError):
        make_plan(dgx1v, "allreduce", [0, 9])
    with pytest.raises(PlanError):
        make_plan(dgx1v, "broadcast", [0, 1], root=3)
    with pytest.raises(PlanError):
        make_plan(dgx1v, "alltoall")
    with pytest.raises(PlanError):
        make_plan(dgx1v, "allgather", root=1)


def test_single_device_plan(dgx1v):
    plan = make_plan(dgx1v, "allreduce", [3])
    assert plan.rate_gbps == 0.0 and plan.trees[0].edges == ()


@pytest.mark.parametrize("name", ["2xcpu-host:2", "2xdgx1-v100", "3xdgx1-v100"])
@pytest.mark.parametrize("collective", ["broadcast", "allgather", "reducescatter", "reduce"])
def test_cross_host_rooted_and_gathering_collectives(name, collective):
    topo = get_preset(name)
    root = 1 if collective in ("broadcast", "reduce") else None
    plan = make_plan(topo, collective, root=root)
    assert not plan.is_three_phase
    nets = [r for r in plan.routes if "net" in r.path]
    assert nets  # data crosses hosts through the network switch
    hosts = len(topo.hosts)
    if name == "2xcpu-host:2":
        # The shared-memory link to the root's neighbour (10 GB/s) holds the plan below the
        # NIC cut (12.5 GB/s; all-gather: each host receives half the buffer through it, 25).
        rate, optimal = (10.0, 12.5) if root is not None else (20.0, 25.0)
    else:
        # NVLink hosts with one NIC per GPU pair: 4 PCIe-fed NICs, 48 GB/s out of each host;
        # an all-gather brings (H - 1) / H of the buffer into each host through them.
        rate = optimal = 48.0 if root is not None else 48.0 * hosts / (hosts - 1)
    assert (plan.rate_gbps, plan.optimal_gbps) == (pytest.approx(rate), pytest.approx(optimal))


def test_multi_host_subset_bounds_use_only_the_allocation():
    # GPU 0 and GPU 8 reach their NICs over one PCIe Gen3 link each (12 GB/s): no all-reduce
    # between them beats 12 GB/s, whatever the other 14 GPUs' NICs could carry.
    topo = get_preset("2xdgx1-v100")
    plan = make_plan(topo, "allreduce", [0, 8], ring=True)
    assert plan.rate_gbps == pytest.approx(12.0)
    assert plan.optimal_gbps == pytest.approx(12.0)
    assert plan.ring_gbps == pytest.approx(12.0)
    # GPUs 0 and 1 share one PCIe switch (12 GB/s to its NIC, 12 GB/s to the CPU socket and the
    # other NICs behind it): 24 GB/s up per host, H = 2 — not the 48 GB/s of all four switches.
    pair = make_plan(topo, "allreduce", [0, 1, 8, 9])
    assert pair.optimal_gbps == pytest.approx(24.0)


@pytest.mark.parametrize("name, uplink", [("2xcpu-host:1", 12.0), ("2xcpu-host:2", 12.5), ("2xdgx1-v100", 48.0)])
def test_multi_host_ring_respects_the_pcie_path_to_the_nic(name, uplink):
    # A NIC hangs off PCIe Gen3 (12 GB/s): the network link alone (12.5) is not the host's cut.
    # A CPU host's ranks each reach the NIC over their own PCIe link; a DGX-1's 4 NICs sit
    # behind 4 PCIe switches.
    topo = get_preset(name)
    assert ring_bandwidth(topo, topo.compute_ids) <= uplink + 1e-9
    for collective in ("broadcast", "allgather", "allreduce"):
        plan = make_plan(topo, collective, ring=True)
        assert plan.ring_gbps == pytest.approx(ring_gbps(topo, topo.compute_ids, collective))
