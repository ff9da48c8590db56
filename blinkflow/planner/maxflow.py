"""The one adapter over OR-Tools max-flow (``ortools.graph.python.max_flow.SimpleMaxFlow``).

Everything in the planner that asks "how much can flow from a to b" comes through here, so the
solver can be swapped (networkx cross-checks it in the tests) and its quirks live in one place:

* OR-Tools wants dense integer node ids: :class:`FlowGraph` maps any hashable ids to 0..n-1.
* OR-Tools wants integer capacities: :func:`integer_scale` finds the exact factor (the LCM of
  the denominators of :class:`fractions.Fraction` capacities) that makes every capacity integral,
  so max-flow values are exact rather than floating-point approximations.
* Every solve checks the status and raises :class:`~blinkflow.errors.PlanError` on anything but
  ``OPTIMAL`` (overflow, bad input) instead of returning a wrong number.

A :class:`FlowGraph` keeps its arcs; capacities can be changed between solves, which is what the
greedy arborescence packing (many feasibility checks on one graph) needs.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Dict, Hashable, Iterable, Mapping, Sequence, Set, Tuple

import numpy as np
from ortools.graph.python import max_flow as _ortools_max_flow

from ..errors import PlanError

Arc = Tuple[Hashable, Hashable]
#: Larger than any cut we build: OR-Tools sums capacities in int64, so keep a wide margin.
_MAX_CAPACITY = 2 ** 53


def integer_scale(values: Iterable[Fraction]) -> int:
    """The smallest positive integer ``s`` such that ``s * v`` is an integer for every value.

    >>> integer_scale([Fraction(1, 2), Fraction(2, 3), 5])
    6
    """
    scale = 1
    for v in values:
        v = Fraction(v)
        scale = scale * v.denominator // math.gcd(scale, v.denominator)
    return scale


#: Float capacities are read to this resolution (1 KB/s when capacities are GB/s): exact for
#: decimals such as 12.5 and for thirds written as 8.333333333333334, and keeps scales small.
MAX_DENOMINATOR = 10 ** 6


def to_fraction(x) -> Fraction:
    """An exact Fraction of a capacity given as int, Fraction or float (floats as the simplest
    fraction within 1e-6, so 12.5 -> 25/2, 0.1 -> 1/10, 8.333333333333334 -> 25/3)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(repr(float(x))).limit_denominator(MAX_DENOMINATOR)


class FlowGraph:
    """A directed graph with integer capacities on which max-flows are computed.

    ``capacities`` maps ``(tail, head)`` to a non-negative integer. Parallel arcs are not
    needed by the planner: one entry per ordered pair.
    """

    def __init__(self, capacities: Mapping[Arc, int], nodes: Sequence[Hashable] = ()):
        self._index: Dict[Hashable, int] = {}
        for n in nodes:
            self._node(n)
        arcs = list(capacities.items())
        for (u, v), cap in arcs:
            self._check_capacity(u, v, cap)
            self._node(u)
            self._node(v)
        self._solver = _ortools_max_flow.SimpleMaxFlow()
        self._arc_index: Dict[Arc, int] = {}
        if arcs:
            tails = np.array([self._index[u] for (u, _), _ in arcs], dtype=np.int64)
            heads = np.array([self._index[v] for (_, v), _ in arcs], dtype=np.int64)
            caps = np.array([c for _, c in arcs], dtype=np.int64)
            ids = self._solver.add_arcs_with_capacity(tails, heads, caps)
            self._arc_index = {arc: int(i) for (arc, _), i in zip(arcs, ids)}
        self._capacity = dict(capacities)

    def _node(self, n: Hashable) -> int:
        if n not in self._index:
            self._index[n] = len(self._index)
        return self._index[n]

    @staticmethod
    def _check_capacity(u, v, cap) -> None:
        if not isinstance(cap, (int, np.integer)) or cap < 0 or cap > _MAX_CAPACITY:
            raise PlanError(f"max-flow capacity of arc {u}->{v} is {cap!r}; expected an integer in "
                            f"[0, 2**53] (scale fractional capacities with integer_scale)")

    @property
    def nodes(self) -> Tuple[Hashable, ...]:
        return tuple(self._index)

    def capacity(self, arc: Arc) -> int:
        return self._capacity.get(arc, 0)

    def set_capacity(self, arc: Arc, cap: int) -> None:
        """Change the capacity of an existing arc (new arcs need a new graph)."""
        if arc not in self._arc_index:
            raise PlanError(f"arc {arc[0]}->{arc[1]} is not in the flow graph")
        self._check_capacity(arc[0], arc[1], cap)
        self._solver.set_arc_capacity(self._arc_index[arc], int(cap))
        self._capacity[arc] = int(cap)

    def max_flow(self, source: Hashable, sink: Hashable) -> int:
        """The value of a maximum ``source -> sink`` flow (0 when either is isolated)."""
        if source == sink:
            raise PlanError(f"max-flow source and sink are the same node {source!r}")
        if source not in self._index or sink not in self._index:
            return 0
        status = self._solver.solve(self._index[source], self._index[sink])
        if status != self._solver.OPTIMAL:
            raise PlanError(f"OR-Tools max-flow {source!r}->{sink!r} failed with status {status!r}")
        return int(self._solver.optimal_flow())

    def min_cut(self, source: Hashable, sink: Hashable) -> Tuple[int, Set[Hashable]]:
        """The max-flow value and the source side of a minimum cut."""
        value = self.max_flow(source, sink)
        if source not in self._index or sink not in self._index:
            return value, {source}
        back = {i: n for n, i in self._index.items()}
        side = {back[i] for i in self._solver.get_source_side_min_cut()}
        return value, side


def max_flow_value(capacities: Mapping[Arc, int], source: Hashable, sink: Hashable) -> int:
    """One max-flow on a fresh graph (integer capacities)."""
    return FlowGraph(capacities).max_flow(source, sink)


def scaled(capacities: Mapping[Arc, Fraction], scale: int) -> Dict[Arc, int]:
    """``capacities`` multiplied by ``scale``; raises PlanError if a product is not integral."""
    out = {}
    for arc, c in capacities.items():
        v = Fraction(c) * scale
        if v.denominator != 1:
            raise PlanError(f"capacity {c} of arc {arc} is not integral at scale {scale}")
        out[arc] = int(v)
    return out
