"""Plans for one fabric of one host: the collectives over a :class:`~.network.Network`.

Each function returns a :class:`PackedPlan` — the trees with exact fractions, the routes of
their logical edges, the rate and the optimum — which :mod:`.make` turns into a :class:`Plan`
(and :mod:`.hybrid` and :mod:`.multihost` combine).

* broadcast / reduce from a root: Edmonds' bound and packing (:mod:`.edmonds`), switches split
  off first (:mod:`.splitting`); reduce uses the same trees reversed.
* all-gather / reduce-scatter: ForestColl's optimum and out-trees (:mod:`.forestcoll`).
* all-reduce: both ForestColl's reduce-scatter + all-gather trees and Blink's single-root
  reduce + broadcast packing (:mod:`.undirected`); the faster under the all-reduce load model
  wins, ForestColl on a tie (balanced shards, one-hop stars on a full mesh).
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Dict, Hashable, List, Tuple

from ..errors import PlanError
from .edmonds import edmonds_bound, pack_arborescences
from .forestcoll import SUPER, allgather_node_rate, allgather_trees, split_for_allgather
from .maxflow import integer_scale, scaled
from .network import Network
from .splitting import split_switches
from .undirected import reduce_broadcast, undirected_capacity

Arc = Tuple[Hashable, Hashable]


@dataclasses.dataclass
class PackedPlan:
    """Trees ``(fraction, root, arcs)`` over logical arcs, their physical paths, and rates."""

    trees: List[Tuple[Fraction, int, Tuple[Arc, ...]]]
    paths: Dict[Arc, Tuple[Hashable, ...]]
    rate: Fraction
    optimal: Fraction
    algorithm: str
    channel: str = "main"

    def used_paths(self) -> Dict[Arc, Tuple[Hashable, ...]]:
        """Paths of the edges the trees use that run through forwarding nodes."""
        used = {a for _, _, arcs in self.trees for a in arcs}
        return {a: p for a, p in self.paths.items() if a in used and len(p) > 2}


def broadcast(net: Network, root: int) -> PackedPlan:
    """Edmonds-optimal broadcast from ``root`` (reduce uses it reversed)."""
    devices = list(net.devices)
    scale = integer_scale(net.capacity.values())
    caps = scaled(net.capacity, scale)
    k = edmonds_bound(caps, root, devices)
    if k <= 0:
        raise PlanError(f"device(s) unreachable from root {root} on the {net.channel} fabric")
    logical, paths = split_switches(caps, root, devices, k, net.forwarding)
    packing = pack_arborescences(logical, root, devices, k)
    trees = [(Fraction(m, k), root, arcs) for m, arcs in packing]
    rate = Fraction(k, scale)
    return PackedPlan(trees, paths, rate, rate, "edmonds", net.channel)


def allgather(net: Network) -> PackedPlan:
    """ForestColl-optimal all-gather (reduce-scatter uses it reversed)."""
    x = allgather_node_rate(net)
    trees, paths = allgather_trees(net, x)
    rate = x * len(net.devices)
    return PackedPlan(trees, paths, rate, rate, "forestcoll", net.channel)


def allreduce_rate(trees, paths, capacity: Dict[Arc, Fraction]) -> Fraction:
    """Exact all-reduce rate of trees under the §3.2 model (forward + reverse load per link)."""
    load: Dict[Arc, Fraction] = {}
    for frac, _, arcs in trees:
        for arc in arcs:
            path = paths.get(arc, arc)
            for a, b in zip(path[:-1], path[1:]):
                load[(a, b)] = load.get((a, b), Fraction(0)) + frac
                load[(b, a)] = load.get((b, a), Fraction(0)) + frac
    worst = Fraction(0)
    for arc, l in load.items():
        if capacity.get(arc, 0) <= 0:
            raise PlanError(f"all-reduce trees load {arc[0]}->{arc[1]}, which has no reverse link")
        worst = max(worst, l / capacity[arc])
    return 1 / worst


def allreduce(net: Network, forestcoll_only: bool = False) -> PackedPlan:
    """The faster of ForestColl's RS + AG and Blink's single-root reduce + broadcast."""
    devices = list(net.devices)
    x = allgather_node_rate(net)
    split = split_for_allgather(net, x)
    fc_trees, fc_paths = allgather_trees(net, x, split)
    fc_rate = allreduce_rate(fc_trees, fc_paths, net.capacity)
    if forestcoll_only:
        return PackedPlan(fc_trees, fc_paths, fc_rate, fc_rate, "forestcoll", net.channel)
    logical, _, scale, _ = split
    pairs = undirected_capacity({a: Fraction(c, scale) for a, c in logical.items() if SUPER not in a})
    if fc_rate >= _simple_bound(pairs, devices):  # already optimal: skip the LP
        return PackedPlan(fc_trees, fc_paths, fc_rate, fc_rate, "forestcoll", net.channel)
    root = _best_root(pairs, devices)
    _, bound, rb_arcs = reduce_broadcast(pairs, root, devices)
    trees = [(f, root, arcs) for f, arcs in rb_arcs]
    # The logical pair capacities are conservative through switches: rate the trees on the
    # physical links, as the verifier will.
    rb_rate = allreduce_rate(trees, fc_paths, net.capacity)
    optimal = max(bound, fc_rate, rb_rate)
    if fc_rate >= rb_rate:
        return PackedPlan(fc_trees, fc_paths, fc_rate, optimal, "forestcoll", net.channel)
    return PackedPlan(trees, fc_paths, rb_rate, optimal, "reduce-broadcast", net.channel)


def _simple_bound(pairs: Dict[Arc, Fraction], devices: List[int]) -> Fraction:
    """Two partition bounds on the undirected packing (Nash-Williams–Tutte): all singletons,
    ``Σ u / (N − 1)``, and one device against the rest, ``u(δ(v))``."""
    degree = {d: Fraction(0) for d in devices}
    for (a, b), u in pairs.items():
        degree[a] += u
        degree[b] += u
    return min(sum(pairs.values(), Fraction(0)) / (len(devices) - 1), min(degree.values()))


def _best_root(pairs: Dict[Arc, Fraction], devices: List[int]) -> int:
    """The device with the most undirected capacity (first in rank order on a tie)."""
    total = {d: Fraction(0) for d in devices}
    for (a, b), u in pairs.items():
        total[a] += u
        total[b] += u
    return max(devices, key=lambda d: (total[d], -devices.index(d)))
