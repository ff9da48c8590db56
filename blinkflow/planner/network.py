"""The capacitated graph a plan is packed on: one fabric of a topology, cut to the allocation.

Blink packs trees on one fabric at a time (NVLink, or PCIe as a separate "channel"): a
:class:`Network` holds the directed links of chosen kinds among the participating devices and
the forwarding nodes (switches, sockets, NICs) that join them, with exact capacities
(:class:`fractions.Fraction` of GB/s). Non-participating GPUs are never used as relays, as in
Blink (a job must not steal another job's GPUs).

The default fabric is the primary one: NVLink / NVSwitch links where the devices have any and
they connect the allocation, ``shm`` for CPU hosts; otherwise PCIe and the CPU sockets' QPI.
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Dict, Hashable, Iterable, List, Sequence, Tuple

from ..errors import PlanError
from ..topology.model import Link, Topology, link_order
from .maxflow import to_fraction

Arc = Tuple[Hashable, Hashable]
PRIMARY_KINDS = ("nvlink", "nvswitch", "shm")
SECONDARY_KINDS = ("pcie", "qpi")


@dataclasses.dataclass(frozen=True)
class Network:
    """Directed arcs with exact capacities (GB/s) among ``devices`` and forwarding nodes."""

    devices: Tuple[int, ...]
    capacity: Dict[Arc, Fraction]
    channel: str = "main"
    kinds: Tuple[str, ...] = ()
    """The link kinds this network was cut from."""

    @property
    def nodes(self) -> Tuple[Hashable, ...]:
        seen: Dict[Hashable, None] = {d: None for d in self.devices}
        for u, v in self.capacity:
            seen.setdefault(u, None)
            seen.setdefault(v, None)
        return tuple(seen)

    @property
    def forwarding(self) -> Tuple[Hashable, ...]:
        devs = set(self.devices)
        return tuple(n for n in self.nodes if n not in devs)

    def out_capacity(self, nodes: Iterable[Hashable]) -> Fraction:
        """Capacity of the arcs leaving the node set (B⁺ of ForestColl)."""
        inside = set(nodes)
        return sum((c for (u, v), c in self.capacity.items() if u in inside and v not in inside), Fraction(0))

    def strongly_connected(self) -> bool:
        """Every device reaches every other device."""
        if len(self.devices) <= 1:
            return True
        fwd: Dict[Hashable, List[Hashable]] = {}
        back: Dict[Hashable, List[Hashable]] = {}
        for (u, v), c in self.capacity.items():
            if c > 0:
                fwd.setdefault(u, []).append(v)
                back.setdefault(v, []).append(u)
        start = self.devices[0]
        return all(set(self.devices) <= _reach(start, adj) for adj in (fwd, back))


def _reach(start: Hashable, adj: Dict[Hashable, List[Hashable]]) -> set:
    seen = {start}
    stack = [start]
    while stack:
        for w in adj.get(stack.pop(), ()):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def fabric(topology: Topology, devices: Sequence[int], kinds: Sequence[str], channel: str = "main") -> Network:
    """The links of ``kinds`` among ``devices`` and the forwarding nodes between them.

    Only what the devices reach through links of ``kinds`` is looked at (on a cluster, one
    host's share of it, not every host's), and forwarding nodes that lead nowhere (all their
    links go to one neighbour) are pruned repeatedly, so a PCIe switch holding only
    non-participating GPUs disappears.
    """
    devs = set(devices)
    links: Dict[Arc, Link] = {}
    seen = set(devs)
    stack = list(devices)
    while stack:
        node = stack.pop()
        for link in (*topology.out_links(node), *topology.in_links(node)):
            other = link.dst if link.src == node else link.src
            if link.kind not in kinds or (other not in devs and topology.node(other).is_compute):
                continue
            links[link.key] = link
            if other not in seen:
                seen.add(other)
                stack.append(other)
    arcs = {l.key: to_fraction(l.gbps) for l in sorted(links.values(), key=link_order)}
    while True:
        peers: Dict[Hashable, set] = {}
        for u, v in arcs:
            peers.setdefault(u, set()).add(v)
            peers.setdefault(v, set()).add(u)
        dead = {n for n, p in peers.items() if n not in devs and len(p) <= 1}
        if not dead:
            break
        arcs = {a: c for a, c in arcs.items() if a[0] not in dead and a[1] not in dead}
    return Network(tuple(devices), arcs, channel, tuple(kinds))


def main_network(topology: Topology, devices: Sequence[int]) -> Network:
    """The primary fabric if it connects the devices, else PCIe/QPI; PlanError if neither does."""
    primary = fabric(topology, devices, PRIMARY_KINDS)
    if primary.capacity and primary.strongly_connected():
        return primary
    secondary = fabric(topology, devices, SECONDARY_KINDS)
    if secondary.strongly_connected():
        return secondary
    everything = fabric(topology, devices, PRIMARY_KINDS + SECONDARY_KINDS)
    if everything.strongly_connected():
        return everything
    raise PlanError(f"devices {list(devices)} of topology {topology.name!r} are not connected "
                    "by any fabric (NVLink, NVSwitch, shm, PCIe, QPI); check the topology")


def pcie_network(topology: Topology, devices: Sequence[int]) -> Network:
    """The PCIe/QPI fabric as Blink's second channel (hybrid plans)."""
    return fabric(topology, devices, SECONDARY_KINDS, channel="pcie")

