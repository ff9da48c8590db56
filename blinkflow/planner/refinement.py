"""The common refinement of several partitions of [0, 1): how a buffer sliced differently by
each host (each host's tree fractions) is cut so every slice has one owner per host.

A three-phase all-reduce (:mod:`.multihost`) cuts the buffer at the union of every host's shard
boundaries, and the cross-host trees (:mod:`.crosshost`) follow the union of every host's tree
fractions; both ask this module.
"""
from __future__ import annotations

from fractions import Fraction
from typing import List, Sequence, Tuple, TypeVar

T = TypeVar("T")


def common_refinement(partitions: Sequence[Sequence[Tuple[Fraction, T]]]
                      ) -> List[Tuple[Fraction, Fraction, Tuple[T, ...]]]:
    """Cut [0, 1) at every boundary of several partitions, each a list of ``(width, item)``
    whose widths sum to 1: ``(start, stop, items)`` per slice, ``items[i]`` being the item of
    partition ``i`` that covers the slice.

    >>> common_refinement([[(Fraction(1, 2), "a"), (Fraction(1, 2), "b")], [(Fraction(1), "x")]])
    [(Fraction(0, 1), Fraction(1, 2), ('a', 'x')), (Fraction(1, 2), Fraction(1, 1), ('b', 'x'))]
    """
    ends = []  # each partition's cumulative boundaries
    cuts = {Fraction(0), Fraction(1)}
    for partition in partitions:
        acc, mine = Fraction(0), []
        for width, _ in partition:
            acc += width
            mine.append(acc)
        ends.append(mine)
        cuts.update(mine)
    edges = sorted(cuts)
    # One walk per partition (not a search per slice): every boundary is a cut, so the piece
    # covering slice [lo, hi) is the first whose end lies beyond lo.
    cursor = [0] * len(partitions)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        items = []
        for i, partition in enumerate(partitions):
            k, mine = cursor[i], ends[i]
            while k < len(mine) and mine[k] <= lo:
                k += 1
            cursor[i] = k
            items.append(partition[min(k, len(partition) - 1)][1])
        out.append((lo, hi, tuple(items)))
    return out
