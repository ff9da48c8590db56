"""How the devices of a host reach the network: the path of each device to a NIC, and the
most a host's allocated devices can push into the network together.

Both the three-phase all-reduce (:mod:`.multihost`), the cross-host trees (:mod:`.crosshost`)
and the ring baseline (:mod:`.ring`) route through here.
"""
from __future__ import annotations

from typing import Dict, Hashable, List, Sequence, Tuple

from ..errors import PlanError
from ..topology.model import Topology
from .maxflow import FlowGraph, integer_scale, scaled, to_fraction


def nic_paths(topology: Topology, device: int, nic_use: Dict[Hashable, int]):
    """Paths device -> nearest NIC -> network switch and back (device -> NIC and back on a mesh
    of measured NIC-to-NIC links); ties go to the least used NIC."""
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
    if topology.node(uplinks[0].dst).kind == "nic":
        # Measured links (topology.measured_links): a mesh of NIC-to-NIC links, no switch.
        return path, tuple(reversed(path))
    up = path + (uplinks[0].dst,)
    return up, tuple(reversed(up))


def joined(up: Tuple[Hashable, ...], down: Tuple[Hashable, ...]) -> Tuple[Hashable, ...]:
    """The physical route of ``up`` (device -> network) followed by ``down`` (network ->
    device): through the switch both end at (``up + down[1:]``), or, on a mesh of NIC-to-NIC
    links, over the link from one NIC to the other (``up + down``)."""
    return up + down[1:] if up[-1] == down[0] else up + down


def nic_on(topology: Topology, up: Tuple[Hashable, ...]) -> Hashable:
    """The NIC an ``up`` path leaves its host through."""
    return next(n for n in reversed(up) if topology.node(n).kind == "nic")


def host_uplink(topology: Topology, host: str, devices: Sequence[int]) -> float:
    """GB/s the allocated ``devices`` of ``host`` can push into the network: a max-flow from
    them through the host's forwarding nodes (never through GPUs outside the allocation, which
    are not relays) to the far ends of its network links."""
    allocated = set(devices)
    own = [n.id for n in topology.nodes_on_host(host) if n.id in allocated or not n.is_compute]
    inside = set(own)
    caps = {(l.src, l.dst): to_fraction(l.gbps) for n in own for l in topology.out_links(n)
            if l.dst in inside or l.kind == "net"}
    if not caps:
        return 0.0
    source = ("uplink", "source")
    for d in (d for d in devices if d in inside):
        caps[(source, d)] = sum(c for (a, _), c in caps.items() if a == d)
    sinks = {b for (a, b) in caps if b not in inside and a != source}
    sink = ("uplink", "sink")
    for b in sinks:
        caps[(b, sink)] = sum(c for (_, x), c in caps.items() if x == b)
    scale = integer_scale(caps.values())
    return FlowGraph(scaled(caps, scale)).max_flow(source, sink) / scale
