"""The plan verifier: every plan passes it before it is returned or run, so a wrong plan is a
:class:`~blinkflow.errors.PlanError` at planning time, never wrong data or a hang at run time.

Checks, raising :class:`~blinkflow.errors.PlanError` with what is wrong and where:

* devices are distinct compute devices of the topology; fractions are positive and sum to 1;
* each tree is a spanning arborescence of the participating devices (every device but the root
  has exactly one parent, everything is reached from the root), rooted at the plan's root for
  broadcast and reduce;
* each edge is a link of the topology, or has a route (on its tree's channel) that joins its
  ends, whose hops are links and whose inner nodes only forward (switches, sockets, NICs —
  never another GPU);
* the rate recomputed from the trees with the load model of :mod:`.loads` equals the reported
  rate, so at that rate no link carries more than its capacity, and the reported optimum is not
  below it;
* a three-phase plan: every intra plan verifies on its host, the cross slices tile [0, 1) and
  each cross group has one device per host and a plan over exactly those devices that verifies
  too (a plan object that several slices share is verified once).
"""
from __future__ import annotations

import math
from typing import Dict, List, Set

from ..errors import PlanError
from ..topology.model import Topology
from .loads import link_loads, plan_rate
from .plan import Plan, Tree

REL_TOL = 1e-6


def verify_plan(plan: Plan, topology: Topology) -> None:
    """Raise PlanError unless ``plan`` is a correct plan of its collective on ``topology``."""
    _check_devices(plan, topology)
    if plan.is_three_phase:
        _check_three_phase(plan, topology)
    else:
        _check_trees(plan, topology)
    loads = link_loads(plan)
    if not loads:  # one device: nothing moves, the rate is reported as 0
        if len(plan.devices) != 1 or plan.rate_gbps != 0.0:
            raise PlanError(f"plan over {len(plan.devices)} devices moves no data")
        return
    # Every hop of every route (and every direct edge) loads a link, so checking each loaded link
    # once checks them all, however many trees share it.
    for (a, b) in loads:
        if topology.link(a, b) is None:
            raise PlanError(f"{plan.collective} plan sends over {a}->{b}, which is not a link of topology "
                            f"{topology.name!r}")
    rate = plan_rate(plan, topology)
    if not math.isclose(rate, plan.rate_gbps, rel_tol=REL_TOL):
        raise PlanError(f"{plan.collective} plan reports {plan.rate_gbps:.6g} GB/s but its trees reach "
                        f"{rate:.6g} GB/s under the load model")
    for (a, b), load in loads.items():
        if load * plan.rate_gbps > topology.capacity(a, b) * (1 + REL_TOL):
            raise PlanError(f"link {a}->{b} carries {load * plan.rate_gbps:.6g} GB/s, above its capacity "
                            f"{topology.capacity(a, b):.6g}")
    if plan.optimal_gbps < plan.rate_gbps * (1 - REL_TOL):
        raise PlanError(f"plan rate {plan.rate_gbps:.6g} exceeds its reported optimum {plan.optimal_gbps:.6g}")


def _check_devices(plan: Plan, topology: Topology) -> None:
    if not plan.devices:
        raise PlanError("plan has no devices")
    if len(set(plan.devices)) != len(plan.devices):
        raise PlanError(f"plan devices {list(plan.devices)} repeat a device")
    compute = set(topology.compute_ids)
    for d in plan.devices:
        if d not in compute:
            raise PlanError(f"plan device {d} is not a compute device of topology {topology.name!r}")


def _check_trees(plan: Plan, topology: Topology) -> None:
    if not plan.trees:
        raise PlanError("plan has no trees")
    total = sum(t.fraction for t in plan.trees)
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        raise PlanError(f"tree fractions sum to {total!r}, not 1")
    devices = set(plan.devices)
    checked = set()  # (parent, child, channel) edges already checked: trees share many
    nodes = _Nodes(topology)
    for i, tree in enumerate(plan.trees):
        where = f"tree {i} (root {tree.root})"
        if not tree.fraction > 0:
            raise PlanError(f"{where} has fraction {tree.fraction!r}; fractions must be positive")
        if plan.collective in ("broadcast", "reduce") and tree.root != plan.root:
            raise PlanError(f"{where} is not rooted at the plan's root {plan.root}")
        _check_arborescence(tree, devices, where)
        for parent, child in tree.edges:
            if (parent, child, tree.channel) not in checked:
                _check_edge(plan, tree, parent, child, topology, nodes, where)
                checked.add((parent, child, tree.channel))


class _Nodes:
    """The topology's node ids and compute ids as sets, for checking routes by set operations."""

    def __init__(self, topology: Topology):
        self.known = {n.id for n in topology.nodes}
        self.compute = set(topology.compute_ids)


def _check_arborescence(tree: Tree, devs: Set[int], where: str) -> None:
    if tree.root not in devs:
        raise PlanError(f"{where}: root is not a participating device")
    parent: Dict[int, int] = {}
    for a, b in tree.edges:
        if a not in devs or b not in devs:
            raise PlanError(f"{where}: edge {a}->{b} leaves the participating devices")
        if b == tree.root:
            raise PlanError(f"{where}: edge {a}->{b} enters the root")
        if b in parent:
            raise PlanError(f"{where}: device {b} has two parents ({parent[b]} and {a})")
        parent[b] = a
    children: Dict[int, List[int]] = tree.children()
    seen = {tree.root}
    stack = [tree.root]
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    if seen != devs:
        missing = sorted(devs - seen)
        raise PlanError(f"{where} does not reach devices {missing} from its root (not a spanning arborescence)")


def _check_edge(plan: Plan, tree: Tree, parent: int, child: int, topology: Topology, nodes: _Nodes,
                where: str) -> None:
    """The edge is a link or routed through forwarding nodes; the links under it are checked
    with the loads (:func:`verify_plan`)."""
    route = plan.route(parent, child, tree.channel)
    if route is None:
        if topology.link(parent, child) is None:
            raise PlanError(f"{where}: edge {parent}->{child} is neither a link nor routed")
        return
    if route.path[0] != parent or route.path[-1] != child:
        raise PlanError(f"route {list(route.path)} does not join {parent} to {child}")
    inner = route.path[1:-1]
    if nodes.known.issuperset(inner) and nodes.compute.isdisjoint(inner):
        return
    for node in inner:
        if node not in nodes.known:
            raise PlanError(f"route {parent}->{child} passes unknown node {node!r}")
        if node in nodes.compute:
            raise PlanError(f"route {parent}->{child} relays through compute device {node}")


def _check_three_phase(plan: Plan, topology: Topology) -> None:
    if plan.collective != "allreduce":
        raise PlanError("only all-reduce plans have three phases")
    hosts = {topology.node(d).host for d in plan.devices}
    covered = set()
    for intra in plan.intra:
        intra_hosts = {topology.node(d).host for d in intra.devices}
        if len(intra_hosts) != 1:
            raise PlanError(f"intra plan over {list(intra.devices)} spans hosts {sorted(intra_hosts)}")
        verify_plan(intra, topology)
        covered |= set(intra.devices)
    if covered != set(plan.devices):
        raise PlanError("intra plans do not cover the plan's devices exactly")
    edge = 0.0
    verified = set()  # slices held by the same devices share one plan object: verify it once
    for group in plan.cross:
        if not math.isclose(group.start, edge, abs_tol=1e-9) or group.stop <= group.start:
            raise PlanError(f"cross slice [{group.start}, {group.stop}) does not continue at {edge}")
        edge = group.stop
        group_hosts = [topology.node(d).host for d in group.devices]
        if sorted(group_hosts) != sorted(hosts) or len(set(group_hosts)) != len(group_hosts):
            raise PlanError(f"cross group {list(group.devices)} is not one device per host")
        if tuple(group.plan.devices) != tuple(group.devices):
            raise PlanError(f"cross group {list(group.devices)} carries a plan over {list(group.plan.devices)}")
        if len(group.devices) > 1 and id(group.plan) not in verified:
            verify_plan(group.plan, topology)
            verified.add(id(group.plan))
    if plan.cross and not math.isclose(edge, 1.0, abs_tol=1e-9):
        raise PlanError(f"cross slices end at {edge}, not 1")
