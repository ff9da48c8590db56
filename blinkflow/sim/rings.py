"""The rings NCCL would build on a set of GPUs (NCCL ``src/graph/search.cc``, as Blink describes it).

* Inside one machine NCCL runs rings only. Over point-to-point NVLink it searches directed
  Hamiltonian cycles and uses as many as the links allow (one NVLink per ring and direction);
  we find the largest packing by a bounded search, each cycle taking one link of every bundle
  it crosses (an integral packing, where the planner's ``ring_gbps`` is a fractional bound).
* On an NVSwitch fabric every ordering is a ring through the switch at the GPU's full port.
* When the GPUs have no NVLink Hamiltonian cycle (62 of 70 four-GPU and 48 of 56 three-GPU
  DGX-1 subsets), NCCL falls back to PCIe and the CPU interconnect for the whole ring: PCIe Gen3
  x16 12 GB/s, cross-socket 6–10 GB/s — here the topology's own PCIe and QPI links carry it.
* Across machines each ring enters and leaves a host through the GPUs next to one NIC, so the
  rings use every NIC.
"""
from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Sequence, Tuple

from ..planner.ring import hamiltonian_cycles
from ..topology.model import Topology

FAST_KINDS = ("nvlink",)
MAX_RINGS = 12
MAX_CYCLES = 5000
MAX_NODES = 20000


def nvlink_units(topology: Topology, devices: Sequence[int]) -> Dict[Tuple[int, int], int]:
    """Directed NVLink bundles among ``devices``: (a, b) -> number of links."""
    wanted = set(devices)
    return {(l.src, l.dst): l.count for d in sorted(wanted) for l in topology.out_links(d)
            if l.kind in FAST_KINDS and l.dst in wanted}


def on_one_switch(topology: Topology, devices: Sequence[int]) -> bool:
    """All devices hang off one NVSwitch node."""
    switches = [n.id for n in topology.nodes if n.kind == "switch" and n.detail == "nvswitch"]
    for sw in switches:
        if all(topology.link(d, sw) and topology.link(sw, d) for d in devices):
            return True
    return False


def hamiltonian_path(units: Dict[Tuple[int, int], int], devices: Sequence[int], start: int,
                     end: Optional[int] = None) -> Optional[List[int]]:
    """A path (not a ring: a chain, or one host's stretch of a multi-host ring) from ``start``
    through every device over arcs with units left, ending at ``end`` when given; prefers arcs
    with more units left so repeated searches spread over the bundles. Depth-first; devices are
    at most a machine's GPUs. Rings come from :func:`blinkflow.planner.ring.hamiltonian_cycles`."""
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
    """The most directed NVLink Hamiltonian cycles that fit the links together (each cycle takes
    one link of every bundle it crosses), as device orders; [] when there is none."""
    devices = sorted(devices)
    if len(devices) < 2:
        return []
    if on_one_switch(topology, devices):
        return [list(devices)]
    units = nvlink_units(topology, devices)
    cycles = list(itertools.islice(hamiltonian_cycles(units, devices), MAX_CYCLES))
    return [list(c) for c in _pack(cycles, units, devices[0])]


def _pack(cycles, units, start) -> List[Tuple[int, ...]]:
    """Largest multiset of cycles within the link counts: depth-first with the bound "each ring
    leaves ``start`` on one of its remaining links", cut off after MAX_NODES search nodes."""
    arcs = [tuple(zip(c, c[1:] + c[:1])) for c in cycles]
    caps = dict(units)
    best: List[int] = []
    chosen: List[int] = []
    visits = 0

    def room() -> int:
        return sum(k for (a, _), k in caps.items() if a == start)

    def search(i: int) -> None:
        nonlocal best, visits
        visits += 1
        if len(chosen) > len(best):
            best = list(chosen)
        if visits > MAX_NODES or len(chosen) + room() <= len(best) or len(best) >= MAX_RINGS:
            return
        for j in range(i, len(arcs)):
            if all(caps[a] > 0 for a in arcs[j]):
                for a in arcs[j]:
                    caps[a] -= 1
                chosen.append(j)
                search(j)
                chosen.pop()
                for a in arcs[j]:
                    caps[a] += 1

    search(0)
    return [cycles[j] for j in best]


def nic_gpus(topology: Topology, host: str, devices: Sequence[int]) -> List[List[int]]:
    """Per NIC of ``host``, the devices behind the same PCIe switch (NIC order), to enter and
    leave the host through that NIC."""
    wanted = set(devices)
    out = []
    for nic in (n for n in topology.nodes_on_host(host) if n.kind == "nic"):
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
