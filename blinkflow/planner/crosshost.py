"""Broadcast, reduce, all-gather and reduce-scatter across hosts, as composed spanning trees.

An all-reduce across hosts has its own three-phase plan (:mod:`.multihost`); the other
collectives keep the one-level form of a plan (trees of all devices) and build each tree from
parts the single-host planner already optimises:

* inside every host, that host's optimal trees from the device where the data enters it
  (Edmonds' packing for broadcast, the host's ForestColl trees of that device for all-gather);
* between hosts, a chain through the network from the entry device of one host to that of the
  next, each hop routed GPU -> PCIe -> NIC -> network switch -> NIC -> PCIe -> GPU. The entry
  device on another host has the same local index as the source, so sources spread over the
  hosts' NICs.

Hosts split the data differently (their packings differ), so the composed trees follow the
common refinement of the hosts' cumulative fractions, as the cross groups of a three-phase plan
do. The rate is what the load model gives for the composition; the reported optimum is the
exact cut bound of the whole machine (Edmonds' min max-flow for broadcast, ForestColl's ratio
for all-gather), so the gap to it is visible.
"""
from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Dict, Hashable, List, Sequence, Tuple

from ..topology.model import LINK_KINDS, Topology
from .edmonds import edmonds_bound
from .forestcoll import allgather_node_rate
from .hosts import PackingMemo, hosts_in_order
from .loads import plan_rate
from .maxflow import integer_scale, scaled
from .network import fabric, main_network
from .nics import joined, nic_on
from .nics import nic_paths as _nic_paths_of
from .plan import Plan, Route, Tree
from .refinement import common_refinement
from .single import PackedPlan, allgather, broadcast

Arc = Tuple[int, int]
Packing = List[Tuple[Fraction, Tuple[Arc, ...]]]


def cross_host_plan(topology: Topology, collective: str, devices: Sequence[int], root) -> Plan:
    """A verified-shape plan of a rooted or gathering collective over devices on many hosts."""
    per_host = hosts_in_order(topology, devices)
    hosts = list(per_host)
    host_of = {d: topology.node(d).host for d in devices}
    nic_use: Dict[Hashable, int] = {}
    nic_paths = {d: _nic_paths_of(topology, d, nic_use) for d in devices}
    intra = _IntraPackings(topology, per_host, collective)
    routes: Dict[Arc, Tuple[Hashable, ...]] = {}
    trees: List[Tree] = []
    if collective in ("broadcast", "reduce"):
        # After the root's host has the data, every device there holds it: leave through one
        # device per NIC ("lanes"), each lane carrying an equal share, so all NICs work.
        lanes = _lanes(topology, per_host[host_of[root]], root, nic_paths)
        jobs = [(root, lane, Fraction(1, len(lanes))) for lane in lanes]
    else:
        jobs = [(d, d, Fraction(1, len(devices))) for d in devices]
    for src, exit_device, weight in jobs:
        order = hosts[hosts.index(host_of[src]):] + hosts[:hosts.index(host_of[src])]
        local = per_host[host_of[src]].index(exit_device)
        entries = [exit_device] + [per_host[h][local % len(per_host[h])] for h in order[1:]]
        chain = list(zip(entries[:-1], entries[1:]))
        for a, b in chain:
            routes[(a, b)] = joined(nic_paths[a][0], nic_paths[b][1])
        parts = [intra.from_device(order[0], src)] + [intra.from_device(h, e) for h, e in zip(order[1:], entries[1:])]
        for width, arcs in _refine(parts):
            trees.append(Tree(root=src, fraction=float(width * weight), edges=tuple(chain) + arcs))
    for (a, b), path in intra.paths.items():
        routes.setdefault((a, b), path)
    used = {e for t in trees for e in t.edges}
    plan = Plan(collective, topology.name, tuple(devices), tuple(trees), 0.0, 0.0, root=root,
                algorithm="cross-host", routes=tuple(Route(a, b, tuple(p)) for (a, b), p in sorted(routes.items())
                                                     if (a, b) in used and len(p) > 2))
    rate = plan_rate(plan, topology)
    return plan.with_figures(rate_gbps=rate, optimal_gbps=max(rate, _bound(topology, devices, collective, root)))


def _lanes(topology: Topology, host_devices: List[int], root: int, nic_paths) -> List[int]:
    """One device per NIC of the root's host (the root itself for its own NIC)."""
    by_nic: Dict[Hashable, int] = {}
    for d in [root] + [d for d in host_devices if d != root]:
        by_nic.setdefault(nic_on(topology, nic_paths[d][0]), d)
    return list(by_nic.values())


class _IntraPackings:
    """Each host's optimal trees from a given device, computed once per (host, device), and
    once per host shape when hosts are identical (:mod:`.hosts`)."""

    def __init__(self, topology: Topology, per_host, collective: str):
        self.topology, self.per_host, self.collective = topology, per_host, collective
        self.paths: Dict[Arc, Tuple[Hashable, ...]] = {}
        self._cache: Dict[Tuple[str, int], Packing] = {}
        self._host: Dict[str, PackedPlan] = {}  # all-gather: one packing per host
        self._memo = PackingMemo()

    def from_device(self, host: str, device: int) -> Packing:
        key = (host, device)
        if key not in self._cache:
            self._cache[key] = self._compute(host, device)
        return self._cache[key]

    def _compute(self, host: str, device: int) -> Packing:
        devs = self.per_host[host]
        if len(devs) == 1:
            return [(Fraction(1), ())]
        net = main_network(self.topology, devs)
        if self.collective in ("broadcast", "reduce"):
            packed = self._memo.packing(net, host, ("broadcast", devs.index(device)), lambda: broadcast(net, device))
        else:
            if host not in self._host:
                self._host[host] = self._memo.packing(net, host, "allgather", lambda: allgather(net))
            packed = self._host[host]
        self.paths.update({a: p for a, p in packed.used_paths().items()})
        mine = [(f, arcs) for f, r, arcs in packed.trees if r == device]
        total = sum(f for f, _ in mine)
        return [(f / total, tuple((int(a), int(b)) for a, b in arcs)) for f, arcs in mine]


def _refine(parts: List[Packing]) -> List[Tuple[Fraction, Tuple[Arc, ...]]]:
    """Common refinement of several packings (each sums to 1): slices and the union of the
    trees covering each slice."""
    return [(hi - lo, tuple(itertools.chain.from_iterable(trees))) for lo, hi, trees in common_refinement(parts)]


def _bound(topology: Topology, devices, collective: str, root) -> float:
    """The exact cut bound over every link of the machine (flows through every switch)."""
    net = fabric(topology, devices, LINK_KINDS)
    if collective in ("broadcast", "reduce"):
        scale = integer_scale(net.capacity.values())
        return edmonds_bound(scaled(net.capacity, scale), root, list(devices)) / scale
    return float(allgather_node_rate(net) * len(devices))
