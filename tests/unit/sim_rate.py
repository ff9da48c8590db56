"""Test oracle: the steady-state rate of a tree plan as the simulator sees it (its own router).

The planner computes ``rate_gbps`` with its routes; recomputing it here with the simulator's
:class:`Router` checks that both agree on which links every edge loads.

DESIGN §3.2: with load(a) = Σ fractions of the trees whose edges (through their routes) use link
``a``, the rate is 1 / max over links of load(a) / capacity(a). Broadcast and all-gather load the
edges' own direction, reduce and reduce-scatter the reverse, all-reduce both (its reduce and
broadcast are pipelined, in flight at once). A three-phase plan adds the loads of its intra
trees (each over its share of the buffer) and of its cross trees (over the group's slice).

The rate is in buffer bytes per second (GB/s): simulated time for ``S`` bytes tends to
``S / rate`` plus the pipeline fill.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from blinkflow.errors import PlanError
from blinkflow.planner.plan import Plan
from blinkflow.topology.model import Topology
from blinkflow.sim.routes import Router

_FORWARD = {"broadcast": (True, False), "allgather": (True, False), "reduce": (False, True),
            "reducescatter": (False, True), "allreduce": (True, True)}


def link_loads(plan: Plan, router: Router, scale: float = 1.0, loads: Optional[Dict] = None) -> Dict:
    """Link key -> load (fraction of the buffer crossing it) for ``plan``, added into ``loads``."""
    loads = {} if loads is None else loads
    if plan.is_three_phase:
        for p in plan.intra:
            total = sum(t.fraction for t in p.trees) or 1.0
            link_loads(p, router, scale / total, loads)
        for g in plan.cross:
            total = sum(t.fraction for t in g.plan.trees) or 1.0
            link_loads(g.plan, router, scale * (g.stop - g.start) / total, loads)
        return loads
    down, up = _FORWARD[plan.collective]
    for tree in plan.trees:
        for a, b in tree.edges:
            pairs = ([(a, b)] if down else []) + ([(b, a)] if up else [])
            for src, dst in pairs:
                for key, _, _ in router.hops(src, dst, tree.channel):
                    loads[key] = loads.get(key, 0.0) + tree.fraction * scale
    return loads


def plan_rate_gbps(plan: Plan, topology: Topology, router: Optional[Router] = None) -> Tuple[float, Tuple]:
    """(rate in GB/s, the bottleneck link) of ``plan`` on ``topology``; a plan that moves no
    data (one device) has an infinite rate."""
    router = router or Router(topology, plan)
    loads = link_loads(plan, router)
    worst, bottleneck = 0.0, None
    for key, load in sorted(loads.items(), key=lambda kv: str(kv[0])):
        link = topology.link(*key)
        if link is None:
            raise PlanError(f"plan uses {key[0]}->{key[1]}, which is not a link of {topology.name!r}")
        if load / link.gbps > worst + 1e-15:
            worst, bottleneck = load / link.gbps, key
    return (float("inf") if worst == 0 else 1.0 / worst), bottleneck
