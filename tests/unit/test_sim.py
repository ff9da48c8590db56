"""The simulator: bandwidth-bound times match the plan's rate plus the pipeline fill, small
messages are latency-bound, links and routes behave, MIAD tunes the chunk."""

import pytest

from blinkflow.errors import PlanError
from blinkflow.planner import Plan, Tree, make_plan
from blinkflow.schedule.lower import lower
from blinkflow.schedule.emit import TreeShape
from blinkflow.sim import simulate, simulate_plan
from blinkflow.sim.engine import bus_factor
from sim_rate import plan_rate_gbps
from blinkflow.sim.routes import DEFAULT_LATENCY_US, Router
from blinkflow.topology import Link, Node, Topology, bidirectional
from blinkflow.topology.presets import get_preset

GB = 10**9
CHUNK = 2**20  # bytes


def _fill(plan, router, chunk_bytes, size):
    """Pipeline fill of tree pipelines: a tree of path length L (depth, twice that for all-reduce)
    moving K chunks takes (K + L - 1) chunk periods, the period being one chunk at the tree's
    share of the rate; plus one latency per hop."""
    rate = plan.rate_gbps * 1e9
    fill = 0.0
    for t in plan.trees:
        hops = TreeShape.of(t, plan.devices).depth * (2 if plan.collective == "allreduce" else 1)
        latency = max(sum(h[2] for h in router.hops(a, b, t.channel)) for a, b in t.edges)
        period = chunk_bytes / (rate * t.fraction)
        assert size * t.fraction / chunk_bytes >= hops  # enough chunks to fill the pipeline
        fill = max(fill, (hops - 1) * period + hops * latency)
    return fill


@pytest.mark.parametrize("preset, collective, devices", [
    ("dgx1-v100", "broadcast", None),
    ("dgx1-v100", "reduce", None),
    ("dgx1-v100", "broadcast", (0, 1, 2, 5)),
    ("dgx1-v100", "allreduce", (0, 1, 2, 3, 4)),
    ("dgx1-v100", "allreduce", (0, 1, 4)),
    ("dgx1-p100", "broadcast", (1, 2, 3, 6)),
])
def test_one_gigabyte_takes_size_over_rate_plus_fill(preset, collective, devices):
    topo = get_preset(preset)
    plan = make_plan(topo, collective, devices)
    router = Router(topo, plan)
    res = simulate(lower(plan, GB // 4, CHUNK // 4), topo, plan, chunk_overhead_us=0.0, router=router)
    expected = GB / (plan.rate_gbps * 1e9) + _fill(plan, router, CHUNK, GB)
    assert res.seconds == pytest.approx(expected, rel=0.02)


def test_many_unequal_trees_share_links_as_planned():
    # ForestColl's 28 trees on the full DGX-1V have fractions from 0.0008 to 0.1; with fair
    # sharing by demand the bottleneck links stay busy and the time is the plan's.
    topo = get_preset("dgx1-v100")
    plan = make_plan(topo, "allreduce")
    res = simulate(lower(plan, GB // 4, 2**19 // 4), topo, plan, chunk_overhead_us=0.0)
    assert res.seconds == pytest.approx(GB / (plan.rate_gbps * 1e9), rel=0.02)
    assert max(res.link_utilisation.values()) > 0.98


def test_small_messages_are_latency_bound_and_the_crossover_shows():
    topo = get_preset("dgx1-v100")
    plan = make_plan(topo, "allreduce", (0, 1, 2, 3))
    # 1 KiB: every tree gets a 16-element unit (tree ranges start 16-byte aligned).
    times = {s: simulate_plan(plan, topo, s).result.seconds for s in (1024, 4096, 2**16, 2**26, 2**28)}
    latency = times[1024]
    assert latency > 4 * DEFAULT_LATENCY_US["nvlink"] * 1e-6  # at least up and down a tree
    assert times[4096] < 1.2 * latency                         # flat: latency-bound
    assert times[2**26] > 50 * latency                         # size-bound
    assert 3.5 < times[2**28] / times[2**26] <= 4.0              # tending to linear in size
    assert 2**28 / times[2**28] > 0.9 * plan.rate_gbps * 1e9     # near the plan's rate


def test_per_rank_completion_and_link_accounting():
    topo = get_preset("dgx1-v100")
    plan = Plan("broadcast", "dgx1-v100", (0, 1, 2), (Tree(0, 1.0, ((0, 1), (1, 2))),), 25.0, 25.0, root=0)
    res = simulate(lower(plan, 10**6, 10**5), topo, plan)
    assert res.per_rank[0] < res.per_rank[1] < res.per_rank[2] == res.seconds
    assert res.link_bytes == {(0, 1): 4e6, (1, 2): 4e6}
    assert all(0 < u <= 1 for u in res.link_utilisation.values())
    assert res.algbw_gbps == pytest.approx(4e6 / res.seconds / 1e9)


def test_latency_overrides():
    nodes = [Node(0, "gpu"), Node(1, "gpu")]
    slow = Topology.build("t", nodes, [Link(0, 1, "nvlink", 1, 25.0, latency_us=50.0), Link(1, 0, "nvlink", 1, 25.0)])
    plan = Plan("broadcast", "t", (0, 1), (Tree(0, 1.0, ((0, 1),)),), 25.0, 25.0, root=0)
    s = lower(plan, 1, 1)
    assert simulate(s, slow, plan).seconds == pytest.approx(50e-6 + 4 / 25e9 + 0 * 1, rel=1e-3)
    fast = Topology.build("t", nodes, bidirectional(0, 1, "nvlink", 1, 25.0))
    assert simulate(s, fast, plan, latency_us={"nvlink": 1.0}).seconds == pytest.approx(1e-6 + 4 / 25e9, rel=1e-3)


def test_routes_through_switches_and_the_pcie_fabric():
    topo = get_preset("dgx1-v100")
    router = Router(topo)
    assert [h[0] for h in router.hops(0, 3)] == [(0, 3)]
    pcie = [h[0] for h in router.hops(0, 1, "pcie")]
    assert pcie == [(0, "pcie0"), ("pcie0", 1)]
    across = [h[0] for h in router.hops(0, 5, "pcie")]
    assert ("cpu0", "cpu1") in across and all(not isinstance(a, int) or a == 0 for a, _ in across)
    a100 = Router(get_preset("dgx-a100"))
    assert [h[0] for h in a100.hops(2, 7)] == [(2, "nvswitch"), ("nvswitch", 7)]
    lonely = Topology.build("t", [Node(0, "gpu"), Node(1, "gpu")], bidirectional(0, 1, "nvlink", 1, 25.0))
    with pytest.raises(PlanError, match="no route"):
        Router(lonely).hops(0, 1, "pcie")


def test_rate_matches_the_planner():
    for preset in ("dgx1-v100", "dgx1-p100", "dgx-a100"):
        topo = get_preset(preset)
        for collective in ("broadcast", "allreduce", "allgather"):
            plan = make_plan(topo, collective)
            assert plan_rate_gbps(plan, topo)[0] == pytest.approx(plan.rate_gbps, rel=1e-6)


def test_miad_grows_then_backs_off_and_an_explicit_chunk_wins():
    topo = get_preset("dgx1-v100")
    plan = make_plan(topo, "broadcast", (0, 1, 2, 3))
    tuned = simulate_plan(plan, topo, 2**26)
    sizes = [c for c, _ in tuned.probes]
    assert sizes[1] == 2 * sizes[0]
    best = min(tuned.probes, key=lambda p: p[1])
    assert tuned.chunk_elems == best[0] and tuned.result.seconds == best[1]
    fixed = simulate_plan(plan, topo, 2**26, chunk_elems=4096)
    assert fixed.chunk_elems == 4096 and len(fixed.probes) == 1 and fixed.result.chunk_elems == 4096


def test_three_phase_plans_simulate():
    topo = get_preset("2xcpu-host:2")
    plan = make_plan(topo, "allreduce")
    res = simulate_plan(plan, topo, 2**24).result
    assert res.seconds > 0 and set(res.per_rank) == set(topo.compute_ids)
    assert any(isinstance(a, str) and "nic" in a for a, _ in res.link_bytes)


def test_bus_factors():
    assert bus_factor("allreduce", 4) == 1.5 and bus_factor("allgather", 4) == 0.75
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("allreduce", 1) == 1.0
