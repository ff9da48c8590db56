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
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Dict, Hashable, List, Sequence, Tuple

from ..errors import PlanError
from ..topology.model import Topology
from .loads import plan_rate
from .maxflow import FlowGraph, integer_scale, scaled, to_fraction
from .network import Network, main_network
from .plan import CrossGroup, Plan, Tree
from .single import PackedPlan, allreduce


def three_phase(topology: Topology, devices: Sequence[int]) -> Plan:
    """A verified-shape three-phase all-reduce plan over devices on several hosts."""
    from .make import to_plan

    hosts: List[str] = []
    for d in devices:
        h = topology.node(d).host
        if h not in hosts:
            hosts.append(h)
    per_host = {h: [d for d in devices if topology.node(d).host == h] for h in hosts}
    intra, shards = [], {}
    for h in hosts:
        devs = per_host[h]
        if len(devs) == 1:
            intra.append(Plan("allreduce", topology.name, tuple(devs), (Tree(devs[0], 1.0, ()),), 0.0, 0.0,
                              algorithm="local"))
            shards[h] = [(Fraction(1), devs[0])]
            continue
        packed = allreduce(main_network(topology, devs), forestcoll_only=True)
        order = {d: i for i, d in enumerate(devs)}
        packed.trees.sort(key=lambda t: order[t[1]])  # each device's slices side by side
        intra.append(to_plan(topology, "allreduce", devs, None, [packed]))
        shards[h] = [(frac, root) for frac, root, _ in packed.trees]
    cross = _cross_groups(topology, hosts, shards)
    plan = Plan("allreduce", topology.name, tuple(devices), (), 0.0, 0.0, algorithm="three-phase",
                intra=tuple(intra), cross=tuple(cross))
    rate = plan_rate(plan, topology)
    return dataclasses.replace(plan, rate_gbps=rate, optimal_gbps=max(rate, _bound(topology, intra, hosts)))


def _cross_groups(topology: Topology, hosts: List[str], shards) -> List[CrossGroup]:
    from .make import to_plan

    cuts = sorted({Fraction(0), Fraction(1)} | {c for h in hosts for c in _cumulative(shards[h])})
    nic_use: Dict[Hashable, int] = {}
    paths_of: Dict[int, Tuple[Tuple[Hashable, ...], Tuple[Hashable, ...]]] = {}
    groups = []
    for start, stop in zip(cuts[:-1], cuts[1:]):
        members = tuple(_holder(shards[h], (start + stop) / 2) for h in hosts)
        for d in members:
            if d not in paths_of:
                paths_of[d] = nic_paths(topology, d, nic_use)
        packed = _group_plan(topology, members, paths_of)
        plan = to_plan(topology, "allreduce", members, None, [packed])
        groups.append(CrossGroup(start=float(start), stop=float(stop), devices=members, plan=plan))
    return groups


def _cumulative(shard: List[Tuple[Fraction, int]]) -> List[Fraction]:
    out, acc = [], Fraction(0)
    for frac, _ in shard:
        acc += frac
        out.append(acc)
    return out


def _holder(shard: List[Tuple[Fraction, int]], point: Fraction) -> int:
    acc = Fraction(0)
    for frac, root in shard:
        acc += frac
        if point < acc:
            return root
    return shard[-1][1]


def nic_paths(topology: Topology, device: int, nic_use: Dict[Hashable, int]):
    """Paths device -> nearest NIC -> network switch and back; ties go to the least used NIC."""
    frontier = {device: (device,)}
    seen = {device}
    found: List[Tuple[Hashable, ...]] = []
    while frontier and not found:
        nxt: Dict[Hashable, Tuple[Hashable, ...]] = {}
        for node, path in sorted(frontier.items(), key=lambda kv: str(kv[0])):
            for link in topology.out_links(node):
                dst = link.dst
                if dst in seen or link.kind == "net" or topology.node(dst).is_compute:
                    continue
                if topology.node(dst).kind == "nic":
                    found.append(path + (dst,))
                elif dst not in nxt:
                    nxt[dst] = path + (dst,)
        seen |= set(nxt)
        frontier = nxt
    if not found:
        raise PlanError(f"device {device} reaches no NIC; a multi-host plan needs one per host")
    path = min(found, key=lambda p: (nic_use.get(p[-1], 0), str(p[-1])))
    nic = path[-1]
    nic_use[nic] = nic_use.get(nic, 0) + 1
    uplinks = [l for l in topology.out_links(nic) if l.kind == "net"]
    if not uplinks:
        raise PlanError(f"NIC {nic!r} has no network link")
    up = path + (uplinks[0].dst,)
    return up, tuple(reversed(up))


def _group_plan(topology: Topology, members, paths_of) -> PackedPlan:
    """All-reduce among one device per host over a star: each member's NIC path contracted to
    one arc into the network switch, the switch split off, the paths expanded again."""
    caps: Dict[Tuple[Hashable, Hashable], Fraction] = {}
    for d in members:
        up, down = paths_of[d]
        caps[(d, up[-1])] = min(to_fraction(topology.capacity(a, b)) for a, b in zip(up[:-1], up[1:]))
        caps[(down[0], d)] = min(to_fraction(topology.capacity(a, b)) for a, b in zip(down[:-1], down[1:]))
    packed = allreduce(Network(tuple(members), caps, "main"), forestcoll_only=True)
    physical = {}
    for arc, path in packed.paths.items():
        if len(path) == 3:  # device -> switch -> device
            physical[arc] = paths_of[path[0]][0] + paths_of[path[2]][1][1:]
    packed.paths = physical
    return packed


def _bound(topology: Topology, intra: List[Plan], hosts: List[str]) -> float:
    """An upper bound for the class: no host beats its own all-reduce optimum, and every host
    must send and receive ``2 (H − 1) / H`` of the buffer through the cut between it and the
    network, whose capacity is a max-flow from the host's devices to the network switch."""
    bounds = [p.optimal_gbps for p in intra if p.optimal_gbps > 0]
    count = len(hosts)
    for h in hosts:
        out = _host_uplink(topology, h)
        if out > 0:
            bounds.append(out * count / (2 * (count - 1)))
    return min(bounds) if bounds else float("inf")


def _host_uplink(topology: Topology, host: str) -> float:
    inside = {n.id for n in topology.nodes if n.host == host}
    caps = {(l.src, l.dst): to_fraction(l.gbps) for l in topology.links
            if l.src in inside and (l.dst in inside or l.kind == "net")}
    if not caps:
        return 0.0
    source = ("uplink", "source")
    for d in topology.compute_on_host(host):
        caps[(source, d)] = sum(c for (a, _), c in caps.items() if a == d)
    sinks = {b for (a, b) in caps if b not in inside and a != source}
    sink = ("uplink", "sink")
    for b in sinks:
        caps[(b, sink)] = sum(c for (_, x), c in caps.items() if x == b)
    scale = integer_scale(caps.values())
    return FlowGraph(scaled(caps, scale)).max_flow(source, sink) / scale
