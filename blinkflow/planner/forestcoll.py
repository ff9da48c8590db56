"""The all-gather / reduce-scatter optimum and its out-trees (ForestColl, arXiv 2402.06787).

With every compute node contributing ``1/N`` of the output, the best all-gather time is
``T* = (M/N) · max over node sets S missing a compute node of |S ∩ C| / B⁺(S)``: the data that
starts inside ``S`` must leave it through ``S``'s outgoing capacity. In rate form every node
sends at ``x* = min_S B⁺(S) / |S ∩ C|`` and the algorithm bandwidth is ``N · x*``.

``x`` is feasible iff, after adding a super-source ``s`` with an arc ``s -> c`` of capacity
``x`` to every compute node ``c``, each compute node receives ``N · x`` from ``s`` (the cut
``{s} ∪ S`` is then exactly the condition above). We find ``x*`` by Newton's method on that
parametric max-flow (Dinkelbach's iteration): test ``x``; if some node gets less, the min cut's
set ``S`` has a smaller ratio, which becomes the next ``x``. Each step strictly lowers ``x`` to
the ratio of a real set, so it stops, exactly, at the optimum.

The trees: Edmonds' packing of ``N · x*`` arborescences from ``s`` (after switches are split
off). The super-source has out-capacity exactly ``N · x*``, so every arborescence uses one arc
``s -> c``; dropping it leaves an out-tree rooted at ``c``, and ``c`` roots trees worth ``1/N``.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Dict, Hashable, List, Tuple

from ..errors import PlanError
from .edmonds import pack_arborescences
from .maxflow import FlowGraph, integer_scale, scaled
from .network import Network
from .splitting import split_switches

SUPER = ("forestcoll", "source")
Arc = Tuple[Hashable, Hashable]


def allgather_node_rate(network: Network) -> Fraction:
    """``x*``: the rate (GB/s) at which every device can send its shard to all others."""
    devices = list(network.devices)
    if len(devices) < 2:
        raise PlanError("all-gather needs at least two devices")
    x = min(network.out_capacity([d]) for d in devices)
    if x <= 0:
        raise PlanError(f"device with no outgoing capacity among {devices}")
    while True:
        cut = _violated_set(network, x)
        if cut is None:
            return x
        ratio = network.out_capacity(cut) / len(set(cut) & set(devices))
        if ratio >= x:  # cannot happen: the cut proves a smaller ratio
            raise PlanError("ForestColl rate search did not decrease; capacities are inconsistent")
        x = ratio


def _augmented(network: Network, x: Fraction) -> Tuple[Dict[Arc, int], int, int]:
    caps: Dict[Arc, Fraction] = dict(network.capacity)
    for d in network.devices:
        caps[(SUPER, d)] = x
    scale = integer_scale(list(caps.values()) + [x * len(network.devices)])
    return scaled(caps, scale), scale, int(x * len(network.devices) * scale)


def _violated_set(network: Network, x: Fraction):
    caps, _, need = _augmented(network, x)
    graph = FlowGraph(caps)
    for d in network.devices:
        value, side = graph.min_cut(SUPER, d)
        if value < need:
            return side - {SUPER}
    return None


def split_for_allgather(network: Network, x: Fraction):
    """Switches split off the super-source graph at rate ``x``: ``(logical, paths, scale, k)``
    with integer logical capacities (GB/s times ``scale``) and ``k = N · x · scale``."""
    caps, scale, k = _augmented(network, x)
    logical, paths = split_switches(caps, SUPER, list(network.devices), k, network.forwarding)
    return logical, paths, scale, k


def allgather_trees(network: Network, x: Fraction, split=None) -> Tuple[List[Tuple[Fraction, int, Tuple[Arc, ...]]], Dict[Arc, tuple]]:
    """Out-trees reaching rate ``x`` per node: ``(fraction, root, logical arcs)`` and the paths.

    Fractions are of the whole output buffer; each root's trees sum to ``1/N``. ``split`` is
    a result of :func:`split_for_allgather` to reuse.
    """
    logical, paths, _, k = split or split_for_allgather(network, x)
    devices = list(network.devices)
    packing = pack_arborescences(logical, SUPER, devices, k)
    trees = []
    for mult, arcs in packing:
        roots = [b for a, b in arcs if a == SUPER]
        if len(roots) != 1:
            raise PlanError("a ForestColl arborescence left the super-source twice")
        trees.append((Fraction(mult, k), roots[0], tuple(a for a in arcs if a[0] != SUPER)))
    return trees, {a: p for a, p in paths.items() if SUPER not in a}
