"""The three-phase all-reduce across hosts (Blink §5, after Horovod's hierarchical all-reduce).

1. Inside every host, reduce-scatter over that host's ForestColl trees: the device rooting a
   tree ends up holding the host's sum of that tree's slice of the buffer.
2. Across hosts, the devices holding the same slice all-reduce it among themselves (a
   :class:`~.plan.CrossGroup` per slice). Hosts may shard differently (different GPU counts or
   links), so the slices are cut at the union of every host's shard boundaries; each slice has
   exactly one holder per host.
3. Inside every host, all-gather over the same trees as phase 1.

A cross group talks through the network: each member reaches the network switch through its
nearest NIC (the PCIe path of the GPU to the NIC behind its PCIe switch), and members of
different groups on one host spread over the host's NICs, so several NICs work in parallel.
The group's own plan comes from the same machinery as a single host's: the network switch is
split off, each logical edge keeping its physical route GPU -> PCIe -> NIC -> net -> NIC -> GPU.

At cluster scale (``docs/planner.md``): identical hosts share one packing, relabelled (:mod:`.hosts`); a
group whose members all reach the switch at one rate is a uniform star, whose optimum is
written down (:mod:`.star`); consecutive slices held by the same devices are one group.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Dict, Hashable, List, Sequence, Tuple

from ..topology.model import Topology
from .assemble import to_plan
from .hosts import PackingMemo, hosts_in_order
from .loads import plan_rate
from .maxflow import to_fraction
from .network import Network, main_network
from .nics import host_uplink, joined, nic_paths
from .plan import CrossGroup, Plan, Route, Tree
from .refinement import common_refinement
from .single import PackedPlan, allreduce
from .star import uniform_star_allreduce


def three_phase(topology: Topology, devices: Sequence[int]) -> Plan:
    """A verified-shape three-phase all-reduce plan over devices on several hosts.

    >>> from blinkflow.topology.presets import get_preset
    >>> plan = three_phase(get_preset("2xdgx1-v100"), list(range(16)))
    >>> len(plan.intra), len(plan.cross), round(plan.rate_gbps, 1)  # 4 NICs x 12 GB/s, H = 2
    (2, 8, 48.0)
    """
    per_host = hosts_in_order(topology, devices)
    hosts = list(per_host)
    packings = PackingMemo()  # identical hosts: one packing, relabelled
    intra, shards = [], {}
    for h in hosts:
        devs = per_host[h]
        if len(devs) == 1:
            intra.append(Plan("allreduce", topology.name, tuple(devs), (Tree(devs[0], 1.0, ()),), 0.0, 0.0,
                              algorithm="local"))
            shards[h] = [(Fraction(1), devs[0])]
            continue
        net = main_network(topology, devs)
        packed = packings.packing(net, h, "allreduce", lambda: _host_packing(net))
        intra.append(to_plan(topology, "allreduce", devs, None, [packed]))
        shards[h] = [(frac, root) for frac, root, _ in packed.trees]
    cross = _cross_groups(topology, hosts, shards)
    plan = Plan("allreduce", topology.name, tuple(devices), (), 0.0, 0.0, algorithm="three-phase",
                intra=tuple(intra), cross=tuple(cross))
    rate = plan_rate(plan, topology)
    return plan.with_figures(rate_gbps=rate, optimal_gbps=max(rate, _bound(topology, intra, hosts, devices)))


def _host_packing(net: Network) -> PackedPlan:
    """A host's phase-1/phase-3 trees: ForestColl's, each device's slices side by side."""
    packed = allreduce(net, forestcoll_only=True)
    order = {d: i for i, d in enumerate(net.devices)}
    packed.trees.sort(key=lambda t: order[t[1]])
    return packed


def one_level_trees(plan: Plan) -> Tuple[Tuple[Tree, ...], Tuple[Route, ...]]:
    """The three-phase all-reduce as one-level ``trees`` for ``blinkrun plan --json`` (``docs/planner.md``).

    Slice [start, stop) of a cross group, tree ``k`` of its plan (fraction ``f``): one spanning
    tree of all devices, the cross tree's edges joined with every host's intra tree for that
    slice (each rooted at the host's group member), carrying ``(stop − start) · f``. Every intra
    edge then carries its tree's fraction and every cross edge its slice's share, as in the
    three-phase load model, so the rate recomputed from these trees is the plan's rate.
    """
    routes: Dict[Tuple[int, int, str], Route] = {}
    for part in list(plan.intra) + [g.plan for g in plan.cross]:
        routes.update(((r.src, r.dst, r.channel), r) for r in part.routes)
    trees = []
    for group in plan.cross:
        middle = (group.start + group.stop) / 2
        local = tuple(e for intra in plan.intra for e in _tree_at(intra.trees, middle).edges)
        for tree in group.plan.trees:
            trees.append(Tree(tree.root, (group.stop - group.start) * tree.fraction, tree.edges + local))
    return tuple(trees), tuple(routes.values())


def _tree_at(trees: Sequence[Tree], point: float) -> Tree:
    acc = 0.0
    for tree in trees:
        acc += tree.fraction
        if point < acc:
            return tree
    return trees[-1]


def _cross_groups(topology: Topology, hosts: List[str], shards) -> List[CrossGroup]:
    nic_use: Dict[Hashable, int] = {}
    access: Dict[int, _Access] = {}
    # Slices held by the same devices (a device roots several trees of its host) share one group
    # plan: the same Plan object, planned, verified and rated once.
    plans: Dict[Tuple[int, ...], Plan] = {}
    slices: List[List] = []
    for start, stop, members in common_refinement([shards[h] for h in hosts]):
        if slices and slices[-1][2] == members:
            # Consecutive slices held by the same devices (a device roots several trees of its
            # host, side by side) are one all-reduce of their union: one group, fewer channels.
            slices[-1][1] = stop
            continue
        for d in members:
            if d not in access:
                access[d] = _Access.of(topology, d, nic_use)
        if members not in plans:
            packed = _group_plan(topology, members, access)
            plans[members] = to_plan(topology, "allreduce", members, None, [packed])
        slices.append([start, stop, members])
    return [CrossGroup(start=float(start), stop=float(stop), devices=members, plan=plans[members])
            for start, stop, members in slices]


class _Access:
    """A device's way into the network: its NIC paths up and down and their bottlenecks."""

    __slots__ = ("up", "down", "up_gbps", "down_gbps")

    def __init__(self, up, down, up_gbps: Fraction, down_gbps: Fraction):
        self.up, self.down, self.up_gbps, self.down_gbps = up, down, up_gbps, down_gbps

    @classmethod
    def of(cls, topology: Topology, device: int, nic_use: Dict[Hashable, int]) -> "_Access":
        up, down = nic_paths(topology, device, nic_use)
        return cls(up, down, _bottleneck(topology, up), _bottleneck(topology, down))


def _bottleneck(topology: Topology, path) -> Fraction:
    return min(to_fraction(topology.capacity(a, b)) for a, b in zip(path[:-1], path[1:]))


def _group_plan(topology: Topology, members, access: Dict[int, _Access]) -> PackedPlan:
    """All-reduce among one device per host over a star: each member's NIC path contracted to
    one arc into the network switch, the switch split off, the paths expanded again. Identical
    hosts give a uniform star, whose optimum is written down (:mod:`.star`). On a mesh of
    measured NIC-to-NIC links (:mod:`blinkflow.topology.measured_links`) each ordered pair of
    members is one arc at the least of its up path, its hosts' link and its down path, so a
    slow pair carries less and the trees relay around it."""
    if topology.node(access[members[0]].up[-1]).kind == "nic":
        return _mesh_group_plan(topology, members, access)
    switch = access[members[0]].up[-1]
    link = access[members[0]].up_gbps
    if all(a.up[-1] == switch and a.down[0] == switch and a.up_gbps == link and a.down_gbps == link
           for a in (access[d] for d in members)):
        packed = uniform_star_allreduce(members, switch, link)
    else:
        caps: Dict[Tuple[Hashable, Hashable], Fraction] = {}
        for d in members:
            caps[(d, access[d].up[-1])] = access[d].up_gbps
            caps[(access[d].down[0], d)] = access[d].down_gbps
        packed = allreduce(Network(tuple(members), caps, "main"), forestcoll_only=True)
    physical = {}
    for arc, path in packed.paths.items():
        if len(path) == 3:  # device -> switch -> device
            physical[arc] = access[path[0]].up + access[path[2]].down[1:]
    packed.paths = physical
    return packed


def _mesh_group_plan(topology: Topology, members, access: Dict[int, _Access]) -> PackedPlan:
    caps: Dict[Tuple[Hashable, Hashable], Fraction] = {}
    for d in members:
        for e in members:
            if d != e:
                link = to_fraction(topology.capacity(access[d].up[-1], access[e].down[0]))
                caps[(d, e)] = min(access[d].up_gbps, link, access[e].down_gbps)
    packed = allreduce(Network(tuple(members), caps, "main"), forestcoll_only=True)
    packed.paths = {(d, e): joined(access[d].up, access[e].down) for d, e in caps}
    return packed


def _bound(topology: Topology, intra: List[Plan], hosts: List[str], devices: Sequence[int]) -> float:
    """An upper bound for the class: no host beats its own all-reduce optimum, and every host
    must send and receive ``2 (H − 1) / H`` of the buffer through the cut between it and the
    network, whose capacity is a max-flow from the host's devices to the network switch."""
    bounds = [p.optimal_gbps for p in intra if p.optimal_gbps > 0]
    count = len(hosts)
    for h in hosts:
        out = host_uplink(topology, h, devices)
        if out > 0:
            bounds.append(out * count / (2 * (count - 1)))
    return min(bounds) if bounds else float("inf")
