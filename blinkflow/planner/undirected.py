"""Blink's single-root all-reduce: reduce up and broadcast down one packing of spanning trees.

In the all-reduce load model (:mod:`.loads`) a tree edge ``a -> b`` carrying ``f`` loads the link
``a -> b`` (broadcast) and the link ``b -> a`` (reduce) with ``f`` each, so the direction of an
edge does not matter: the trees form a packing of *undirected* spanning trees in which a pair of
devices offers ``min(c(a, b), c(b, a))``. The optimum is the Nash-Williams–Tutte bound
``min over partitions P of c(δ(P)) / (|P| − 1)``, and by Frank's orientation theorem (1980)
a graph holds ``k`` such trees iff it has an orientation with ``λ(r, v) ≥ k`` from any root
``r``; in that orientation Edmonds' packing gives the trees, all rooted at ``r``.

The orientation is the solution of a small linear program (GLOP, OR-Tools): split each pair's
capacity into two directions and route ``k`` units from ``r`` to every device inside them.
Its optimum is a partition ratio, so it is snapped to the exact fraction with denominator
dividing ``lcm(1..N−1)`` times the capacities'; the orientation is snapped likewise and the
Edmonds bound of the snapped orientation, computed exactly by max-flow, is what the plan
claims.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Dict, Hashable, List, Sequence, Tuple

from ortools.linear_solver import pywraplp

from ..errors import PlanError
from .edmonds import edmonds_bound, pack_arborescences
from .maxflow import integer_scale, scaled

Pair = Tuple[Hashable, Hashable]


def undirected_capacity(logical: Dict[Pair, Fraction]) -> Dict[Pair, Fraction]:
    """``{(a, b): min(c(a,b), c(b,a))}`` for a < b in listing order, pairs with capacity only."""
    out: Dict[Pair, Fraction] = {}
    for (a, b), c in logical.items():
        back = logical.get((b, a), 0)
        if back > 0 and (b, a) not in out:
            out[(a, b)] = min(c, back)
    return out


def _lp_orientation(pairs: Dict[Pair, Fraction], root, devices: Sequence[Hashable]):
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        raise PlanError("OR-Tools GLOP linear solver is unavailable")
    k = solver.NumVar(0, solver.infinity(), "k")
    orient = {}
    for (a, b), u in pairs.items():
        orient[(a, b)] = solver.NumVar(0, float(u), f"o{a}_{b}")
        orient[(b, a)] = solver.NumVar(0, float(u), f"o{b}_{a}")
        solver.Add(orient[(a, b)] + orient[(b, a)] <= float(u))
    for t in devices:
        if t == root:
            continue
        flow = {arc: solver.NumVar(0, solver.infinity(), "") for arc in orient}
        for arc, var in flow.items():
            solver.Add(var <= orient[arc])
        for v in devices:
            if v == root:
                continue
            net = sum(flow[a] for a in flow if a[1] == v) - sum(flow[a] for a in flow if a[0] == v)
            solver.Add(net == (k if v == t else 0))
    solver.Maximize(k)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise PlanError("the all-reduce orientation LP did not reach an optimum")
    return k.solution_value(), {arc: var.solution_value() for arc, var in orient.items()}


def _snap(value: float, grid: int) -> Fraction:
    return Fraction(round(value * grid), grid)


def reduce_broadcast(pairs: Dict[Pair, Fraction], root, devices: Sequence[Hashable]):
    """Trees ``[(fraction, arcs)]`` all rooted at ``root`` and the all-reduce rate they reach.

    Returns ``(rate, bound, trees)``: ``bound`` is the snapped LP optimum (the Nash-Williams–
    Tutte bound), ``rate`` what the exact packing reaches (equal unless snapping lost a hair).
    """
    devices = list(devices)
    base = integer_scale(pairs.values())
    grid = base * math.lcm(*range(1, len(devices))) if len(devices) > 2 else base
    k_float, orient = _lp_orientation(pairs, root, devices)
    bound = _snap(k_float, grid)
    # The orientation's vertex may need a finer grid than k; snap it finely and keep each
    # pair's two directions within the pair's capacity.
    fine = grid * math.factorial(min(len(devices), 8))
    oriented: Dict[Pair, Fraction] = {}
    for (a, b), u in pairs.items():
        ab = min(max(_snap(orient[(a, b)], fine), Fraction(0)), u)
        ba = min(max(_snap(orient[(b, a)], fine), Fraction(0)), u - ab)
        oriented[(a, b)], oriented[(b, a)] = ab, ba
    scale = integer_scale(list(oriented.values()) + [bound])
    caps = scaled(oriented, scale)
    k = min(edmonds_bound(caps, root, devices), int(bound * scale))
    if k <= 0:
        raise PlanError(f"no spanning tree of devices {devices} from root {root!r}")
    packing = pack_arborescences(caps, root, devices, k)
    trees: List[Tuple[Fraction, Tuple[Pair, ...]]] = [(Fraction(m, k), arcs) for m, arcs in packing]
    return Fraction(k, scale), bound, trees
