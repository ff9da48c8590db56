"""Remove switches by edge splitting, keeping every terminal's connectivity from the root.

Edmonds' theorem packs arborescences that span *every* node, so switches (NVSwitch, PCIe
switches, CPU sockets, NICs — nodes that forward but neither send nor receive data) must go
first. Splitting off the pair ``u -> w -> v`` by ``a`` replaces ``a`` units of ``u -> w`` and of
``w -> v`` with ``a`` units of a new logical arc ``u -> v`` whose route runs through ``w``.
Mader (1982) and, for rooted connectivity, Bang-Jensen, Frank and Jackson (1995) show that at a
node whose in-capacity equals its out-capacity a *complete* splitting exists that keeps
``λ(root, t) ≥ k`` for every terminal ``t`` — the optimum stays reachable without the switch.
ForestColl (arXiv 2402.06787, §5) uses the same step to handle NVSwitch fabrics.

Splitting ``a`` off ``(u, w, v)`` lowers the out-capacity of a root-side set ``X`` by ``a``
exactly when ``u, v ∈ X ∌ w`` or ``w ∈ X ∌ u, v``; so the largest admissible amount is the
smallest slack ``c(δ⁺X) − k`` over those sets, two max-flows per terminal
(:func:`_max_admissible`). We first split every pair by its fair share
``c(u,w)·c(w,v) / (out(w) − c(w,u))`` — on a uniform switch that yields the complete graph
of equal logical links, the balanced answer — and then split what is left maximally.
"""
from __future__ import annotations

from typing import Dict, Hashable, List, Sequence, Tuple

from ..errors import PlanError
from .maxflow import FlowGraph

Arc = Tuple[Hashable, Hashable]
Path = Tuple[Hashable, ...]
_SRC = ("split", "source")
_SINK = ("split", "sink")


def split_switches(capacity: Dict[Arc, int], root: Hashable, terminals: Sequence[Hashable], k: int,
                   switches: Sequence[Hashable]) -> Tuple[Dict[Arc, int], Dict[Arc, Path]]:
    """Split off every node of ``switches``; return logical capacities and each arc's path.

    ``capacity`` holds integer capacities with ``λ(root, t) ≥ k`` for every terminal ``t``;
    the result keeps that and contains only root and terminal nodes. Raises PlanError when a
    switch's in- and out-capacity differ (the theorem needs them equal) or when the splitting
    loses connectivity — impossible when the switches form a forest (every pair then has one
    route); with cycles through switches, pairs with two routes are left unsplit and the result
    is checked.
    """
    caps = {a: c for a, c in capacity.items() if c > 0}
    paths: Dict[Arc, Path] = {a: a for a in caps}
    for w in sorted(switches, key=str):
        _split_node(caps, paths, w, root, list(terminals), k)
    _check(caps, root, terminals, k, "after removing every switch")
    return caps, {a: paths[a] for a in caps}


def _split_node(caps: Dict[Arc, int], paths: Dict[Arc, Path], w: Hashable, root: Hashable,
                terminals: List[Hashable], k: int) -> None:
    ins = sorted((u for (u, x) in caps if x == w), key=str)
    outs = sorted((v for (x, v) in caps if x == w), key=str)
    total_in = sum(caps[(u, w)] for u in ins)
    total_out = sum(caps[(w, v)] for v in outs)
    # Mader's theorem needs in = out at w; an unbalanced switch (or one unbalanced by pairs
    # left unsplit before it) is still split greedily, and the final check decides.
    # A pair already joined another way (a direct NVLink beside a PCIe switch, a second NIC)
    # is not split: one logical arc must have one route. What stays at w is dropped below and
    # the connectivity check at the end says whether that was affordable.
    pairs = [(u, v) for u in ins for v in outs
             if u == v or paths.get((u, v)) in (None, _joined(paths[(u, w)], paths[(w, v)]))]
    graph = _graph(caps, pairs, w)
    start_in = {u: caps[(u, w)] for u in ins}
    start_out = {v: caps[(w, v)] for v in outs}
    # Pass 1: fair shares, each kept only if the connectivity survives (checked by max-flow).
    for (u, v) in pairs:
        if u == v:
            continue
        rest = total_out - start_out.get(u, 0)
        share = start_in[u] * start_out[v] // rest if rest else 0
        share = min(share, caps.get((u, w), 0), caps.get((w, v), 0))
        if share > 0:
            _apply(caps, paths, graph, u, w, v, share)
            if not _holds(graph, root, terminals, k):
                _apply(caps, paths, graph, u, w, v, -share)
    # Pass 2: split whatever is left by the largest admissible amount.
    for (u, v) in pairs:
        top = min(caps.get((u, w), 0), caps.get((w, v), 0))
        if top <= 0:
            continue
        amount = min(top, _max_admissible(graph, u, w, v, root, terminals, k))
        if amount > 0:
            _apply(caps, paths, graph, u, w, v, amount)
    # Whatever remains at w (loops u -> w -> u) carries nothing between distinct nodes.
    for arc in [a for a in caps if w in a]:
        del caps[arc]
        paths.pop(arc, None)
    for arc in [a for a in caps if a[0] == a[1]]:
        del caps[arc]


def _graph(caps: Dict[Arc, int], pairs, w) -> FlowGraph:
    arcs = dict(caps)
    for (u, v) in pairs:
        if u != v:
            arcs.setdefault((u, v), 0)
    nodes = {x for a in arcs for x in a}
    for x in nodes:
        arcs[(_SRC, x)] = 0
        arcs[(x, _SINK)] = 0
    return FlowGraph(arcs)


def _apply(caps, paths, graph: FlowGraph, u, w, v, amount: int) -> None:
    for arc, delta in (((u, w), -amount), ((w, v), -amount), ((u, v), amount)):
        if arc[0] == arc[1]:
            continue
        new = caps.get(arc, 0) + delta
        caps[arc] = new
        graph.set_capacity(arc, new)
    if u != v:
        paths[(u, v)] = _joined(paths[(u, w)], paths[(w, v)])
        if caps[(u, v)] == 0:
            del caps[(u, v)]
            paths.pop((u, v), None)


def _joined(first: Path, second: Path) -> Path:
    """``first`` then ``second`` (which starts where ``first`` ends), with detours cut out.

    Splitting at a later switch can join two routes that went out and back over the same
    node (``pcie0 -> cpu0 -> cpu1`` and ``cpu1 -> cpu0 -> pcie1``); the shortcut uses a subset
    of those links, so the capacity taken from them still covers it.
    """
    out: list = []
    for node in first + second[1:]:
        if node in out:
            del out[out.index(node) + 1:]
        else:
            out.append(node)
    return tuple(out)


def _holds(graph: FlowGraph, root, terminals, k) -> bool:
    return all(graph.max_flow(root, t) >= k for t in terminals if t != root)


def _multi_flow(graph: FlowGraph, sources, sinks) -> int:
    """Max-flow from a set to a set (super-terminals joined by arcs larger than any cut)."""
    big = 2 ** 52
    for s in sources:
        graph.set_capacity((_SRC, s), big)
    for t in sinks:
        graph.set_capacity((t, _SINK), big)
    value = graph.max_flow(_SRC, _SINK)
    for s in sources:
        graph.set_capacity((_SRC, s), 0)
    for t in sinks:
        graph.set_capacity((t, _SINK), 0)
    return value


def _max_admissible(graph: FlowGraph, u, w, v, root, terminals, k) -> int:
    """The largest amount of ``u -> w -> v`` that can be split off keeping λ(root, t) ≥ k."""
    best = None
    for t in terminals:
        if t == root:
            continue
        if t not in (u, v):  # sets X ⊇ {root, u, v}, X ∌ w, t
            slack = _multi_flow(graph, {root, u, v}, {w, t}) - k
            best = slack if best is None else min(best, slack)
        if root not in (u, v):  # sets X ⊇ {root, w}, X ∌ u, v, t
            slack = _multi_flow(graph, {root, w}, {u, v, t}) - k
            best = slack if best is None else min(best, slack)
    return max(0, best) if best is not None else 0


def _check(caps: Dict[Arc, int], root, terminals, k, when: str) -> None:
    graph = FlowGraph(caps, nodes=[root, *terminals])
    for t in terminals:
        if t != root and graph.max_flow(root, t) < k:
            raise PlanError(f"edge splitting lost connectivity from {root!r} to {t!r} {when}; "
                            "the switches' in- and out-capacities may be unbalanced")
