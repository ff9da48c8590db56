"""The NCCL-style ring baseline (``ring_gbps`` of ``blinkrun plan --json``).

NCCL runs rings only inside a machine (trees only between machines). Over point-to-point NVLink it packs
Hamiltonian cycles of the allocated GPUs; we give it the best *fractional* packing of directed
Hamiltonian cycles (a small LP over the enumerated cycles, GLOP), an upper bound on what NCCL's
own search finds. On a switch fabric (NVSwitch, or a CPU host's shared memory) a ring runs at
the slowest device's link. When the GPUs have no NVLink Hamiltonian cycle, NCCL falls back to
PCIe / shared memory: 12 GB/s for PCIe Gen3 x16, 10 GB/s when the ring crosses CPU sockets.

Ring algorithm bandwidth from ring bandwidth ``B`` over ``N`` devices: broadcast and reduce
``B`` (pipelined chain); all-gather and reduce-scatter ``B · N / (N − 1)``; all-reduce
``B · N / (2 (N − 1))``.
"""
from __future__ import annotations

import functools
import itertools
from typing import Dict, Hashable, Iterable, Iterator, List, Sequence, Tuple

from ortools.linear_solver import pywraplp

from ..errors import PlanError
from ..topology.model import Topology
from ..topology.presets import PCIE_GBPS, QPI_GBPS
from .network import PRIMARY_KINDS, fabric
from .nics import host_uplink

MAX_CYCLES = 2000


def ring_bandwidth(topology: Topology, devices: Sequence[int]) -> float:
    """GB/s one NCCL-style ring packing moves per device (0 for a single device)."""
    return _ring_bandwidth(topology, tuple(devices))


@functools.lru_cache(maxsize=256)  # topologies are frozen; every collective of an allocation shares it
def _ring_bandwidth(topology: Topology, devices: Tuple[int, ...]) -> float:
    devices = list(devices)
    if len(devices) < 2:
        return 0.0
    hosts = {topology.node(d).host for d in devices}
    if len(hosts) > 1:
        return _multi_host(topology, devices, hosts)
    net = fabric(topology, devices, PRIMARY_KINDS)
    if net.capacity and net.strongly_connected():
        caps = {a: float(c) for a, c in net.capacity.items()}
        if net.forwarding:  # a switch fabric: every device talks to every other at its link rate
            return min(min(_sum(caps, d, 0), _sum(caps, d, 1)) for d in devices)
        cycles = list(itertools.islice(hamiltonian_cycles(caps, devices), MAX_CYCLES + 1))
        if len(cycles) > MAX_CYCLES:  # too many to pack: the per-device bound (exact on symmetric meshes)
            return min(min(_sum(caps, d, 0), _sum(caps, d, 1)) for d in devices)
        if cycles:
            return _pack_cycles(caps, cycles)
    return _pcie_fallback(topology, devices)


def ring_gbps(topology: Topology, devices: Sequence[int], collective: str) -> float:
    """Ring algorithm bandwidth of ``collective`` (see the module docstring)."""
    n = len(devices)
    bw = ring_bandwidth(topology, devices)
    if n < 2:
        return 0.0
    if collective in ("allgather", "reducescatter"):
        return bw * n / (n - 1)
    if collective == "allreduce":
        return bw * n / (2 * (n - 1))
    return bw


def _sum(caps: Dict[Tuple[Hashable, Hashable], float], node, side: int) -> float:
    return sum(c for a, c in caps.items() if a[side] == node)


def hamiltonian_cycles(arcs: Iterable[Tuple[int, int]], devices: Sequence[int]) -> Iterator[Tuple[int, ...]]:
    """Every directed Hamiltonian cycle of ``devices`` over ``arcs`` (pairs; arcs touching other
    nodes are ignored), each as a device order starting at ``devices[0]``, in lexicographic order.

    Lazy, because a mesh has factorially many: callers take as many as they can use. This is the
    one ring search of blinkflow; the simulator's NCCL rings (:mod:`blinkflow.sim.rings`) use it too.

    >>> list(hamiltonian_cycles({(0, 1), (1, 2), (2, 0), (0, 2), (2, 1), (1, 0)}, [0, 1, 2]))
    [(0, 1, 2), (0, 2, 1)]
    """
    if len(devices) < 2:
        return
    successors: Dict[int, List[int]] = {d: [] for d in devices}
    for a, b in arcs:
        if a in successors and b in successors and a != b:
            successors[a].append(b)
    for a in successors:
        successors[a].sort()
    start = devices[0]
    path, seen = [start], {start}

    def grow() -> Iterator[Tuple[int, ...]]:
        if len(path) == len(devices):
            if start in successors[path[-1]]:
                yield tuple(path)
            return
        for nxt in successors[path[-1]]:
            if nxt not in seen:
                seen.add(nxt)
                path.append(nxt)
                yield from grow()
                path.pop()
                seen.discard(nxt)

    yield from grow()


def _pack_cycles(caps, cycles) -> float:
    solver = pywraplp.Solver.CreateSolver("GLOP")
    ys = [solver.NumVar(0, solver.infinity(), "") for _ in cycles]
    uses: Dict[Tuple[int, int], list] = {}
    for y, cyc in zip(ys, cycles):
        for a, b in zip(cyc, cyc[1:] + cyc[:1]):
            uses.setdefault((a, b), []).append(y)
    for arc, vars_ in uses.items():
        solver.Add(sum(vars_) <= caps[arc])
    solver.Maximize(sum(ys))
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:  # a failed solve's objective is no bound at all
        raise PlanError(f"ring packing LP ended with status {status}, not OPTIMAL")
    return solver.Objective().Value()


def _socket_of(topology: Topology, device: int):
    """The CPU socket a device's PCIe path leads to (None if it has no PCIe)."""
    seen = {device}
    frontier = [device]
    while frontier:
        nxt = []
        for n in frontier:
            for link in topology.out_links(n):
                if link.kind != "pcie" or link.dst in seen:
                    continue
                node = topology.node(link.dst)
                if node.kind == "socket":
                    return node.id
                if not node.is_compute:
                    seen.add(link.dst)
                    nxt.append(link.dst)
        frontier = nxt
    return None


def _pcie_fallback(topology: Topology, devices: List[int]) -> float:
    sockets = {_socket_of(topology, d) for d in devices}
    return PCIE_GBPS[3] if len(sockets) <= 1 else QPI_GBPS


def _multi_host(topology: Topology, devices: List[int], hosts) -> float:
    """Rings cross every host boundary: no faster than the slowest host's own ring, nor than
    what the allocated devices of a host can push through its NICs (PCIe paths included)."""
    intra = min(ring_bandwidth(topology, [d for d in devices if topology.node(d).host == h]) or float("inf")
                for h in hosts)
    nic = min(host_uplink(topology, h, devices) for h in hosts)
    return min(intra, nic) if nic > 0 else intra
