"""The link load model of every plan (``docs/planner.md``), and the rate it implies.

``load(a)`` is the sum of the fractions of the trees whose edges cross physical link ``a``
(an edge through a switch crosses every link of its route). Broadcast, reduce, all-gather and
reduce-scatter move each tree's data once, in one direction, so the time for a buffer of ``M``
bytes is ``max over links of M · load(a) / capacity(a)`` and the rate (algorithm bandwidth) is
``1 / max(load / capacity)``. An all-reduce keeps both directions busy at once (pipelined
reduce up, broadcast down): a link carries the forward load of the trees using it plus the
reverse load of the trees using its opposite link.

A three-phase plan runs its phases as one pipeline: each host's intra plan is an all-reduce of
the whole buffer (reduce-scatter, later all-gather, over the same trees) and each cross group an
all-reduce of its slice, so their loads add, the cross loads weighted by the slice width.
"""
from __future__ import annotations

from typing import Dict, Hashable, List, Tuple

from ..errors import PlanError
from ..topology.model import Topology
from .plan import Plan, Tree

Link = Tuple[Hashable, Hashable]
#: Collectives whose trees are used in both directions at once.
BIDIRECTIONAL = ("allreduce",)


def edge_hops(plan: Plan, tree: Tree, parent: int, child: int) -> List[Link]:
    """The physical links under one tree edge: its route on the tree's channel, else the link."""
    route = plan.route(parent, child, tree.channel)
    if route is not None:
        return route.hops()
    return [(parent, child)]


def link_loads(plan: Plan, topology: Topology = None) -> Dict[Link, float]:
    """Load of every physical link the plan touches, in fractions of the buffer (module docstring).

    ``topology`` is accepted for symmetry with :func:`plan_rate`; the loads depend on the plan
    alone (routes are stored in it).
    """
    return dict(_loads(plan))


def _loads(plan: Plan) -> Dict[Link, float]:
    # Computed once per plan object and kept on it (plans are immutable): planning, verifying and
    # rating a three-phase plan all ask for the loads of the same cross-host groups.
    return plan.derived("link_loads", _compute_loads)


def _compute_loads(plan: Plan) -> Dict[Link, float]:
    loads: Dict[Link, float] = {}
    if plan.is_three_phase:
        for intra in plan.intra:
            _add(loads, _loads(intra), 1.0)
        for group in plan.cross:
            _add(loads, _loads(group.plan), group.stop - group.start)
        return loads
    both = plan.collective in BIDIRECTIONAL
    route = plan.route
    for tree in plan.trees:
        fraction, channel = tree.fraction, tree.channel
        for parent, child in tree.edges:
            r = route(parent, child, channel)
            hops = zip(r.path, r.path[1:]) if r is not None else ((parent, child),)
            for a, b in hops:
                loads[(a, b)] = loads.get((a, b), 0.0) + fraction
                if both:
                    loads[(b, a)] = loads.get((b, a), 0.0) + fraction
    return loads


def _add(into: Dict[Link, float], loads: Dict[Link, float], weight: float) -> None:
    for link, load in loads.items():
        into[link] = into.get(link, 0.0) + weight * load


def plan_rate(plan: Plan, topology: Topology) -> float:
    """The rate (GB/s) the plan's trees reach on the topology: ``1 / max(load / capacity)``."""
    worst = 0.0
    for (a, b), load in _loads(plan).items():
        cap = topology.capacity(a, b)
        if cap <= 0:
            raise PlanError(f"plan loads {a}->{b}, which is not a link of topology {topology.name!r}")
        worst = max(worst, load / cap)
    if worst == 0.0:
        return float("inf")
    return 1.0 / worst
