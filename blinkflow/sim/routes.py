"""Which physical links a logical transfer ``src -> dst`` occupies, and their default latencies.

A plan edge between devices with no direct link runs through switches (NVSwitch, PCIe switch,
CPU sockets, the network); the plan names that path in a :class:`Route` when it chose one.
Otherwise the router takes the fastest path whose intermediate nodes are not compute devices
(GPUs do not forward in hardware). Trees of the ``pcie`` fabric (Blink's hybrid PCIe trees)
avoid NVLink and NVSwitch links.
"""
from __future__ import annotations

import heapq
from typing import Dict, List, Optional, Tuple

from ..errors import PlanError
from ..planner.plan import Plan, Route
from ..topology.model import Link, NodeId, Topology

#: One-way latency per hop in microseconds when ``Link.latency_us`` is 0. Orders of magnitude
#: from NCCL's tuning model (``src/graph/tuning.cc``: ~0.6–1 µs per NVLink hop at the protocol
#: level plus the kernel's per-step synchronisation) and InfiniBand's few µs per message; they
#: set where small messages stop being latency-bound, not the bandwidth results.
DEFAULT_LATENCY_US = {"nvlink": 2.0, "nvswitch": 1.0, "pcie": 2.0, "qpi": 2.5, "shm": 1.0, "net": 3.0}

_FAST_FABRIC = ("nvlink", "nvswitch")

Hop = Tuple[Tuple[NodeId, NodeId], float, float]
"""((src, dst) of one link, GB/s, latency in seconds)."""


def plan_routes(plan: Optional[Plan]) -> Dict[Tuple[int, int, str], Route]:
    """Every route named by a plan and its nested three-phase plans, by (src, dst, channel)."""
    out: Dict[Tuple[int, int, str], Route] = {}
    if plan is None:
        return out
    stack = [plan]
    while stack:
        p = stack.pop()
        for r in p.routes:
            out.setdefault((r.src, r.dst, getattr(r, "channel", "main")), r)
        stack.extend(p.intra)
        stack.extend(g.plan for g in p.cross)
    return out


class Router:
    """Resolves ``(src, dst, fabric)`` to the hops a transfer occupies (memoised)."""

    def __init__(self, topology: Topology, plan: Optional[Plan] = None,
                 latency_us: Optional[Dict[str, float]] = None):
        self.topology = topology
        self.latency_us = dict(DEFAULT_LATENCY_US, **(latency_us or {}))
        self._links: Dict[Tuple[NodeId, NodeId], Link] = {l.key: l for l in topology.links}
        self._compute = set(topology.compute_ids)
        self._named = plan_routes(plan)
        self._cache: Dict[Tuple[int, int, str], Tuple[Hop, ...]] = {}

    def latency_s(self, link: Link) -> float:
        us = link.latency_us or self.latency_us.get(link.kind, 2.0)
        return us * 1e-6

    def hops(self, src: int, dst: int, fabric: str = "main") -> Tuple[Hop, ...]:
        key = (src, dst, fabric)
        if key not in self._cache:
            self._cache[key] = tuple((l.key, l.gbps, self.latency_s(l)) for l in self._path(src, dst, fabric))
        return self._cache[key]

    def _path(self, src: int, dst: int, fabric: str) -> List[Link]:
        named = self._named.get((src, dst, fabric))
        if named is not None:
            return [self._link(a, b, named) for a, b in named.hops()]
        allowed = None if fabric == "main" else (lambda l: l.kind not in _FAST_FABRIC)
        direct = self._links.get((src, dst))
        if direct is not None and (allowed is None or allowed(direct)):
            return [direct]
        path = self._fastest(src, dst, allowed)
        if path is None:
            what = "" if fabric == "main" else f" on the {fabric} fabric"
            raise PlanError(f"no route from device {src} to device {dst}{what} in topology {self.topology.name!r}")
        return path

    def _link(self, a: NodeId, b: NodeId, route: Route) -> Link:
        link = self._links.get((a, b))
        if link is None:
            raise PlanError(f"route {route.path} of edge {route.src}->{route.dst} uses {a}->{b}, which is not a link")
        return link

    def _fastest(self, src: int, dst: int, allowed) -> Optional[List[Link]]:
        """Dijkstra on seconds per byte (1 / GB/s), forwarding only through non-compute nodes."""
        out: Dict[NodeId, List[Link]] = {}
        for l in self.topology.links:
            if allowed is None or allowed(l):
                out.setdefault(l.src, []).append(l)
        best = {src: 0.0}
        back: Dict[NodeId, Link] = {}
        heap = [(0.0, 0, src)]
        tie = 0
        while heap:
            cost, _, node = heapq.heappop(heap)
            if node == dst:
                break
            if cost > best.get(node, float("inf")) or (node != src and node in self._compute):
                continue
            for l in out.get(node, ()):
                c = cost + 1.0 / l.gbps
                if c < best.get(l.dst, float("inf")) - 1e-15:
                    best[l.dst] = c
                    back[l.dst] = l
                    tie += 1
                    heapq.heappush(heap, (c, tie, l.dst))
        if dst not in back:
            return None
        path, node = [], dst
        while node != src:
            path.append(back[node])
            node = back[node].src
        return path[::-1]

