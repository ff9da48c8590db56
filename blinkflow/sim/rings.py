"""The rings NCCL would build on a set of GPUs (NCCL ``src/graph/search.cc``, as Blink describes it).

* Inside one machine NCCL runs rings only. Over point-to-point NVLink it searches directed
  Hamiltonian cycles and uses as many as the links allow (one NVLink per ring and direction);
  we pack them greedily, each cycle taking one link of every bundle it crosses.
* On an NVSwitch fabric every ordering is a ring through the switch at the GPU's full port.
* When the GPUs have no NVLink Hamiltonian cycle (62 of 70 four-GPU and 48 of 56 three-GPU
  DGX-1 subsets), NCCL falls back to PCIe and the CPU interconnect for the whole ring: PCIe Gen3
  x16 12 GB/s, cross-socket 6–10 GB/s — here the topology's own PCIe and QPI links carry it.
* Across machines each ring enters and leaves a host through the GPUs next to one NIC, so the
  rings use every NIC.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ..topology.model import Topology

FAST_KINDS = ("nvlink",)
MAX_RINGS = 12


def nvlink_units(topology: Topology, devices: Sequence[int]) -> Dict[Tuple[int, int], int]:
    """Directed NVLink bundles among ``devices``: (a, b) -> number of links."""
    wanted = set(devices)
    return {(l.src, l.dst): l.count for l in topology.links
            if l.kind in FAST_KINDS and l.src in wanted and l.dst in wanted}


def on_one_switch(topology: Topology, devices: Sequence[int]) -> bool:
    """All devices hang off one NVSwitch node."""
    switches = [n.id for n in topology.nodes if n.kind == "switch" and n.detail == "nvswitch"]
    for sw in switches:
        if all(topology.link(d, sw) and topology.link(sw, d) for d in devices):
            return True
    return False


def hamiltonian_path(units: Dict[Tuple[int, int], int], devices: Sequence[int], start: int,
                     end: Optional[int] = None, cycle: bool = False) -> Optional[List[int]]:
    """A path from ``start`` through every device over arcs with units left (ending at ``end``
    when given, or closing back to ``start`` when ``cycle``); prefers arcs with more units left so
    repeated searches spread over the bundles. Depth-first; devices are at most a machine's GPUs."""
    n = len(devices)
    out: Dict[int, List[int]] = {d: [] for d in devices}
    for (a, b), k in units.items():
        if k > 0 and a in out and b in out:
            out[a].append(b)
    for a in out:
        out[a].sort(key=lambda b: (-units[(a, b)], b))
    path, seen = [start], {start}

    def grow() -> bool:
        if len(path) == n:
            if cycle:
                return n > 1 and units.get((path[-1], start), 0) > 0
            return end is None or path[-1] == end
        for b in out[path[-1]]:
            if b in seen or (b == end and len(path) < n - 1):
                continue
            path.append(b)
            seen.add(b)
            if grow():
                return True
            path.pop()
            seen.discard(b)
        return False

    return list(path) if grow() else None


def nvlink_rings(topology: Topology, devices: Sequence[int]) -> List[List[int]]:
    """Greedily packed directed NVLink Hamiltonian cycles (each a device order); [] if none."""
    devices = sorted(devices)
    if len(devices) < 2:
        return []
    if on_one_switch(topology, devices):
        return [list(devices)]
    units = dict(nvlink_units(topology, devices))
    rings: List[List[int]] = []
    while len(rings) < MAX_RINGS:
        ring = hamiltonian_path(units, devices, devices[0], cycle=True)
        if ring is None:
            break
        rings.append(ring)
        for a, b in zip(ring, ring[1:] + ring[:1]):
            units[(a, b)] -= 1
    return rings


def nic_gpus(topology: Topology, host: str, devices: Sequence[int]) -> List[List[int]]:
    """Per NIC of ``host``, the devices behind the same PCIe switch (NIC order), to enter and
    leave the host through that NIC."""
    wanted = set(devices)
    out = []
    for nic in (n for n in topology.nodes if n.kind == "nic" and n.host == host):
        near = []
        for sw in topology.neighbors(nic.id):
            near += [d for d in topology.neighbors(sw) if d in wanted]
        near += [d for d in topology.neighbors(nic.id) if d in wanted]
        if near:
            out.append(sorted(set(near)))
    return out


def multi_host_rings(topology: Topology, devices: Sequence[int]) -> List[List[int]]:
    """One ring per NIC: host after host, entering and leaving each host next to that NIC and
    visiting the host's other GPUs over NVLink when a Hamiltonian path allows it."""
    hosts: Dict[str, List[int]] = {}
    for d in devices:
        hosts.setdefault(topology.node(d).host, []).append(d)
    per_host = {h: nic_gpus(topology, h, devs) for h, devs in hosts.items()}
    nrings = max(1, min(len(v) for v in per_host.values()))
    rings = []
    for k in range(nrings):
        ring: List[int] = []
        for h, devs in hosts.items():
            devs = sorted(devs)
            near = per_host[h][k] if per_host[h] else devs[:1]
            first = near[0]
            last = near[1] if len(near) > 1 else None
            units = nvlink_units(topology, devs)
            path = (hamiltonian_path(units, devs, first, end=last) if last is not None else None) \
                or hamiltonian_path(units, devs, first) \
                or [first] + [d for d in devs if d != first]
            ring += path
        rings.append(ring)
    return rings
