"""The plan's trees on one host, in local ranks, cut into synchronous levels.

Blink (MLSys 2020, §3-4) runs an all-reduce as reduce-up and broadcast-down over spanning
trees, each tree carrying its fraction of the buffer. On a host the fabric is shared memory, so
every "edge" is a rank reading its neighbour's segment; we run a tree level by level with a
barrier between levels (never a busy spin):

* reduce: deepest level first, every node with children folds its children's partial sums into
  its own segment, in a fixed order (itself, then children by local rank);
* broadcast: shallowest level first, every child copies its parent's finished range.

A cpu-host plan is one one-hop star per rank (a reduce-scatter + all-gather), so both phases
take one level; deeper trees (a Blink single-root plan, a planner fallback) take more.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from ...errors import BackendError
from ...planner.plan import Plan, split_counts


@dataclasses.dataclass(frozen=True)
class LocalTree:
    root: int
    fraction: float
    children: Dict[int, Tuple[int, ...]]
    depth: Dict[int, int]


@dataclasses.dataclass(frozen=True)
class LocalTrees:
    """Trees over local ranks ``0..size-1``; ``signature`` is equal on hosts running the same
    shape (the three-phase protocol needs shard ``i`` owned by the same local rank everywhere)."""

    size: int
    trees: Tuple[LocalTree, ...]

    @property
    def signature(self) -> Tuple:
        return tuple((t.root, round(t.fraction, 12), tuple(sorted(t.children.items()))) for t in self.trees)

    def shards(self, nelems: int) -> List[Tuple[int, int]]:
        """(offset, count) of every tree's range, contiguous in tree order (split_counts)."""
        counts = split_counts([t.fraction for t in self.trees], nelems)
        out, offset = [], 0
        for c in counts:
            out.append((offset, c))
            offset += c
        return out

    def reduce_levels(self) -> List[List[Tuple[int, int, Tuple[int, ...]]]]:
        """Levels of (tree index, node, children), deepest first; nodes without children skip."""
        deepest = max((max(t.depth.values()) for t in self.trees), default=0)
        levels = []
        for d in range(deepest - 1, -1, -1):
            level = [(i, node, kids) for i, t in enumerate(self.trees)
                     for node, kids in sorted(t.children.items()) if kids and t.depth[node] == d]
            if level:
                levels.append(level)
        return levels

    def broadcast_levels(self) -> List[List[Tuple[int, int, int]]]:
        """Levels of (tree index, child, parent), shallowest first."""
        deepest = max((max(t.depth.values()) for t in self.trees), default=0)
        levels = []
        for d in range(1, deepest + 1):
            level = [(i, child, parent) for i, t in enumerate(self.trees)
                     for parent, kids in sorted(t.children.items()) for child in kids if t.depth[child] == d]
            if level:
                levels.append(level)
        return levels


def star_trees(size: int) -> LocalTrees:
    """One one-hop star per rank, each carrying 1/size: the cpu-host plan (reduce-scatter +
    all-gather), used when no plan for this host is available."""
    trees = []
    for root in range(size):
        kids = tuple(r for r in range(size) if r != root)
        depth = {r: (0 if r == root else 1) for r in range(size)}
        trees.append(LocalTree(root, 1.0 / size, {root: kids} if kids else {}, depth))
    return LocalTrees(size, tuple(trees))


def single_root_star(size: int) -> LocalTrees:
    """One star rooted at local rank 0 carrying everything: the shape every host can share
    when hosts differ (phase 2 then runs among the local ranks 0, which every host has)."""
    kids = tuple(range(1, size))
    depth = {r: int(r > 0) for r in range(size)}
    return LocalTrees(size, (LocalTree(0, 1.0, {0: kids} if kids else {}, depth),))


def host_plan(plan: Optional[Plan], local_devices: Sequence[int]) -> Optional[Plan]:
    """The part of ``plan`` that runs on this host: the plan itself on a single host, the
    matching ``intra`` plan of a three-phase plan, None when the plan covers other devices."""
    if plan is None:
        return None
    want = set(local_devices)
    if plan.is_three_phase:
        for p in plan.intra:
            if set(p.devices) == want:
                return p
        return None
    return plan if set(plan.devices) == want else None


def local_trees(plan: Optional[Plan], local_devices: Sequence[int]) -> LocalTrees:
    """Translate the host's plan (device ids) into local ranks; a star set when there is none."""
    size = len(local_devices)
    hp = host_plan(plan, local_devices)
    if hp is None or not hp.trees:
        return star_trees(size)
    rank_of = {d: i for i, d in enumerate(local_devices)}
    trees = []
    for t in hp.trees:
        children: Dict[int, List[int]] = {}
        depth = {rank_of[t.root]: 0}
        for parent, child in t.edges:
            if parent not in rank_of or child not in rank_of:
                raise BackendError(f"plan tree rooted at {t.root} has edge {parent}->{child} outside this host's "
                                   f"devices {list(local_devices)}")
            children.setdefault(rank_of[parent], []).append(rank_of[child])
        # depths by walking from the root; a malformed tree leaves nodes undiscovered
        frontier = [rank_of[t.root]]
        while frontier:
            nxt = []
            for node in frontier:
                for kid in children.get(node, ()):
                    if kid in depth:
                        raise BackendError(f"plan tree rooted at {t.root} is not an arborescence (node {kid} twice)")
                    depth[kid] = depth[node] + 1
                    nxt.append(kid)
            frontier = nxt
        if len(depth) != size:
            raise BackendError(f"plan tree rooted at {t.root} spans {len(depth)} of this host's {size} ranks")
        trees.append(LocalTree(rank_of[t.root], t.fraction,
                               {k: tuple(sorted(v)) for k, v in children.items()}, depth))
    return LocalTrees(size, tuple(trees))
