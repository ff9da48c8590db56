"""All-reduce among devices that meet at one switch, each through one link per direction: the
cross-host groups of a three-phase plan, where every member reaches the network switch through
its NIC.

Under the all-reduce load model (:mod:`.loads`) a tree edge ``p -> c`` routed ``p -> switch -> c``
loads both links of ``p`` and both links of ``c`` with the tree's fraction (the broadcast goes
down it, the reduction up), so a member's links carry ``Σ_T f_T · deg_T(d)``, its weighted
degree. The degrees of a spanning tree of ``N`` members sum to ``2(N − 1)``, so some member
carries at least ``2(N − 1) / N`` of the buffer: with every link at ``c`` GB/s no all-reduce beats
``c · N / (2(N − 1))`` — the bound of Patarasuk and Yuan (2009) for bandwidth-optimal all-reduce.
The ``N`` one-hop stars (member ``i`` sends its ``1/N`` to every other member directly) give every
member the weighted degree ``(N − 1)/N + (N − 1)/N`` and reach it.

These are the out-trees ForestColl (arXiv 2402.06787) packs on such a star — a test checks that
the two agree tree for tree — written down in O(N²) instead of packed by max-flows, whose cost
grows ~20-fold per doubling of ``N`` (a second at 32 hosts, half a minute at 64).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Hashable, Sequence

from .single import PackedPlan


def uniform_star_allreduce(members: Sequence[int], switch: Hashable, gbps: Fraction) -> PackedPlan:
    """One-hop stars over ``members``, each joined to ``switch`` by ``gbps`` in both directions.

    >>> packed = uniform_star_allreduce([0, 8, 16], "net", Fraction(12))
    >>> packed.rate, [(str(f), root, arcs) for f, root, arcs in packed.trees][0]
    (Fraction(9, 1), ('1/3', 0, ((0, 8), (0, 16))))
    """
    n = len(members)
    trees = [(Fraction(1, n), m, tuple((m, o) for o in members if o != m)) for m in members]
    paths = {(m, o): (m, switch, o) for m in members for o in members if o != m}
    rate = Fraction(gbps) * n / (2 * (n - 1))
    return PackedPlan(trees, paths, rate, rate, "forestcoll")
