"""Packed parts in, a :class:`~.plan.Plan` out: the step every planning path ends with.

:func:`run_collective` runs one collective's algorithm on one fabric (:mod:`.single`) and
:func:`to_plan` turns one or more :class:`~.single.PackedPlan` parts into a Plan's trees and
routes. Both sit below the entry point (:mod:`.make`) and the composing modules
(:mod:`.hybrid`, :mod:`.multihost`), so those import them without a cycle.
"""
from __future__ import annotations

from typing import Sequence

from ..topology.model import Topology
from .network import Network
from .plan import Plan, Route, Tree
from .single import PackedPlan, allgather, allreduce, broadcast


def run_collective(net: Network, collective: str, root=None, forestcoll_only: bool = False) -> PackedPlan:
    """The optimal packing of ``collective`` on one fabric: Edmonds' arborescences for broadcast
    and reduce, ForestColl's out-trees for all-gather and reduce-scatter, the better of those and
    Blink's single-root packing for all-reduce."""
    if collective in ("broadcast", "reduce"):
        return broadcast(net, root)
    if collective in ("allgather", "reducescatter"):
        return allgather(net)
    return allreduce(net, forestcoll_only=forestcoll_only)


def to_plan(topology: Topology, collective: str, devices, root, parts: Sequence[PackedPlan],
            weights: Sequence = (1,), rate=None, optimal=None) -> Plan:
    """Assemble a Plan from packed parts, part ``i`` carrying ``weights[i]`` of the buffer."""
    trees, routes = [], []
    for part, weight in zip(parts, weights):
        for frac, tree_root, arcs in part.trees:
            trees.append(Tree(root=tree_root, fraction=float(frac * weight),
                              edges=tuple((int(a), int(b)) for a, b in arcs), channel=part.channel))
        for (a, b), path in sorted(part.used_paths().items(), key=lambda kv: (kv[0][0], kv[0][1])):
            routes.append(Route(src=int(a), dst=int(b), path=tuple(path), channel=part.channel))
    rate = parts[0].rate if rate is None else rate
    optimal = parts[0].optimal if optimal is None else optimal
    algorithm = "+".join(dict.fromkeys(p.algorithm for p in parts))
    return Plan(collective=collective, topology=topology.name, devices=tuple(devices), trees=tuple(trees),
                rate_gbps=float(rate), optimal_gbps=float(optimal), root=root, algorithm=algorithm,
                routes=tuple(routes))
