"""Edmonds' arborescence packing: the broadcast optimum and an integral packing that reaches it.

Edmonds (1973): in a directed graph with integer capacities, the largest number of
arc-disjoint spanning arborescences rooted at ``r`` equals ``min over v ≠ r of λ(r, v)``, the
smallest max-flow from the root. So the best broadcast rate from ``r`` is that minimum, and it is
reached by sending ``1/k`` of the data down each of ``k`` arborescences.

The packing follows Lovász's (1976) constructive proof: grow one arborescence arc by arc,
keeping ``λ(r, v) ≥ k − 1`` in the graph minus the arcs taken so far; Lovász shows a growing
arc always exists. Once the tree spans, we take it with the largest multiplicity ``μ`` that
keeps ``λ(r, v) ≥ k − μ`` in the remainder (the condition is monotone in ``μ``, so a binary search
finds it) — few distinct trees, each carrying a large share. Growth prefers arcs near the root
(shallow trees, less pipeline latency) and then arcs with much capacity left (large ``μ``).
"""
from __future__ import annotations

from typing import Dict, Hashable, List, Sequence, Tuple

from ..errors import PlanError
from .maxflow import FlowGraph

Arc = Tuple[Hashable, Hashable]


def edmonds_bound(capacity: Dict[Arc, int], root: Hashable, terminals: Sequence[Hashable]) -> int:
    """``min over t of maxflow(root, t)``: the most arborescences (Edmonds 1973)."""
    graph = FlowGraph(capacity, nodes=[root, *terminals])
    return min((graph.max_flow(root, t) for t in terminals if t != root), default=0)


def pack_arborescences(capacity: Dict[Arc, int], root: Hashable, terminals: Sequence[Hashable],
                       k: int) -> List[Tuple[int, Tuple[Arc, ...]]]:
    """``k`` arc-disjoint spanning arborescences rooted at ``root``, as ``(multiplicity, arcs)``.

    ``capacity`` holds integer capacities over ``root`` and ``terminals`` only (switches split
    off first). Multiplicities sum to ``k`` and no arc is used beyond its capacity. Raises
    PlanError when ``k`` exceeds the Edmonds bound.
    """
    nodes = [root] + [t for t in terminals if t != root]
    if len(nodes) == 1 or k == 0:
        return [(k, ())] if k else []
    caps = {a: c for a, c in capacity.items() if c > 0 and a[0] in nodes and a[1] in nodes and a[1] != root}
    graph = FlowGraph(caps, nodes=nodes)
    if not _feasible(graph, root, nodes, k):
        raise PlanError(f"cannot pack {k} arborescences from {root!r}: the Edmonds bound is lower")
    out: List[Tuple[int, Tuple[Arc, ...]]] = []
    remaining = k
    while remaining > 0:
        tree = _grow(graph, caps, root, nodes, remaining)
        mult = _largest_multiplicity(graph, caps, tree, root, nodes, remaining)
        for arc in tree:
            caps[arc] -= mult
            graph.set_capacity(arc, caps[arc])
        remaining -= mult
        out.append((mult, tree))
    return out


def _feasible(graph: FlowGraph, root, nodes, k: int) -> bool:
    return all(graph.max_flow(root, t) >= k for t in nodes if t != root)


def _grow(graph: FlowGraph, caps: Dict[Arc, int], root, nodes, k: int) -> Tuple[Arc, ...]:
    """One spanning arborescence whose removal keeps λ(root, v) ≥ k − 1 (Lovász 1976)."""
    depth = {root: 0}
    tree: List[Arc] = []
    order = {n: i for i, n in enumerate(nodes)}
    out: Dict[Hashable, List[Arc]] = {}
    for arc in caps:
        out.setdefault(arc[0], []).append(arc)
    while len(depth) < len(nodes):
        candidates = [arc for a in depth for arc in out.get(a, ()) if caps[arc] > 0 and arc[1] not in depth]
        candidates.sort(key=lambda arc: (depth[arc[0]], -caps[arc], order[arc[0]], order[arc[1]]))
        for arc in candidates:
            graph.set_capacity(arc, caps[arc] - 1)
            if _feasible(graph, root, nodes, k - 1):
                caps[arc] -= 1  # keep it taken while the tree grows
                tree.append(arc)
                depth[arc[1]] = depth[arc[0]] + 1
                break
            graph.set_capacity(arc, caps[arc])
        else:  # Lovász's lemma says this cannot happen on a feasible input.
            raise PlanError(f"arborescence growth from {root!r} got stuck; the capacities are inconsistent")
    for arc in tree:  # give the unit back: the caller subtracts the chosen multiplicity
        caps[arc] += 1
        graph.set_capacity(arc, caps[arc])
    return tuple(tree)


def _largest_multiplicity(graph: FlowGraph, caps, tree, root, nodes, k: int) -> int:
    """Largest μ with λ(root, v) ≥ k − μ after removing μ copies of ``tree`` (monotone in μ)."""
    lo, hi = 1, min([k] + [caps[a] for a in tree])

    def ok(mu: int) -> bool:
        for arc in tree:
            graph.set_capacity(arc, caps[arc] - mu)
        good = _feasible(graph, root, nodes, k - mu)
        for arc in tree:
            graph.set_capacity(arc, caps[arc])
        return good

    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
