"""Every subset of 2..8 GPUs of both DGX-1s: rates equal independent brute-force bounds.

Broadcast from every root reaches Edmonds' bound; all-gather reaches ForestColl's cut bound;
all-reduce reaches the Nash-Williams–Tutte partition bound (on PCIe-only subsets, whose
switches make that bound a Steiner problem, it lies between half the all-gather bound and the
undirected cut bound). ``make_plan`` runs the verifier on every plan it returns.
"""
from itertools import combinations

import pytest

from blinkflow.planner import make_plan
from blinkflow.topology.presets import get_preset

from planner_bruteforce import allgather_bound, allreduce_bound, broadcast_bound, graph_of

REL = 1e-9


def _subsets():
    return [s for k in range(2, 9) for s in combinations(range(8), k)]


@pytest.fixture(scope="module", params=["dgx1-v100", "dgx1-p100"])
def topo(request):
    return get_preset(request.param)


def test_broadcast_every_subset_every_root(topo):
    for sub in _subsets():
        arcs = graph_of(topo, sub)
        for root in sub:
            plan = make_plan(topo, "broadcast", sub, root=root)
            bound = float(broadcast_bound(arcs, sub, root))
            assert plan.rate_gbps == pytest.approx(bound, rel=REL), (sub, root)
            assert all(t.root == root for t in plan.trees)


def test_allgather_and_allreduce_every_subset(topo):
    for sub in _subsets():
        arcs = graph_of(topo, sub)
        ag = make_plan(topo, "allgather", sub)
        assert ag.rate_gbps == pytest.approx(float(allgather_bound(arcs, sub)), rel=REL), sub
        ar = make_plan(topo, "allreduce", sub)
        has_switches = any(not isinstance(x, int) for a in arcs for x in a)
        if not has_switches:
            assert ar.rate_gbps == pytest.approx(float(allreduce_bound(arcs, sub)), rel=REL), sub
            assert ar.optimal_gbps == pytest.approx(ar.rate_gbps, rel=REL), sub
        else:
            assert ag.rate_gbps / 2 * (1 - REL) <= ar.rate_gbps <= ar.optimal_gbps * (1 + REL), sub
        rs = make_plan(topo, "reducescatter", sub)
        assert rs.rate_gbps == pytest.approx(ag.rate_gbps, rel=REL)
