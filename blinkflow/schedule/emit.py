"""Chunk-pipelined reduction and broadcast of one element range over one spanning tree.

Blink (MLSys 2020, §4) splits each tree's share of the buffer into chunks and streams them down
(broadcast) or up (reduce) the tree, so every edge of a depth-``D`` tree is busy after ``D`` chunk
times and the whole transfer takes about ``(K + D - 1)`` chunk times for ``K`` chunks instead of
``K·D``. Reductions are fused with forwarding (``recv_reduce_send``), as in Blink's and NCCL's
kernels, so a partial sum never makes an extra round trip through memory.

The reduction order is fixed by the tree: a node adds its children's partial sums to its own
value in the order of ``tree.edges``. For all-reduce the root's result is broadcast, so every rank
ends with bitwise the same bytes whatever the floating-point order was.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..planner.plan import Tree
from .builder import ScheduleBuilder


def chunk_ranges(offset: int, count: int, chunk_elems: int) -> List[Tuple[int, int]]:
    """``[offset, offset + count)`` cut into chunks of ``chunk_elems`` (the last may be shorter)."""
    return [(o, min(chunk_elems, offset + count - o)) for o in range(offset, offset + count, chunk_elems)]


class TreeShape:
    """A checked arborescence: children lists in edge order and a pre-order from the root."""

    def __init__(self, root: int, edges: Iterable[Tuple[int, int]], devices: Sequence[int], what: str = "tree"):
        self.root = root
        self.children: Dict[int, List[int]] = {}
        self.parent: Dict[int, int] = {}
        wanted = set(devices)
        if root not in wanted:
            raise PlanError(f"{what}: root {root} is not a participating device {sorted(wanted)}")
        for parent, child in edges:
            if parent not in wanted or child not in wanted:
                raise PlanError(f"{what}: edge {parent}->{child} leaves the devices {sorted(wanted)}")
            if child in self.parent or child == root:
                raise PlanError(f"{what}: device {child} has two parents (not an arborescence)")
            self.parent[child] = parent
            self.children.setdefault(parent, []).append(child)
        self.preorder: List[int] = []
        stack = [root]
        while stack:
            node = stack.pop()
            self.preorder.append(node)
            stack.extend(reversed(self.children.get(node, [])))
        if set(self.preorder) != wanted or len(self.preorder) != len(wanted):
            missing = sorted(wanted - set(self.preorder))
            raise PlanError(f"{what} rooted at {root} does not span devices {missing}")

    @classmethod
    def of(cls, tree: Tree, devices: Sequence[int], what: str = "tree") -> "TreeShape":
        return cls(tree.root, tree.edges, devices, what)

    @property
    def depth(self) -> int:
        level = {self.root: 0}
        for node in self.preorder:
            for child in self.children.get(node, []):
                level[child] = level[node] + 1
        return max(level.values())


def emit_broadcast(b: ScheduleBuilder, shape: TreeShape, offset: int, count: int, chunk_elems: int,
                   channel: int) -> None:
    """Stream ``[offset, offset + count)`` from the root down ``shape``, chunk by chunk."""
    for off, n in chunk_ranges(offset, count, chunk_elems):
        for node in shape.preorder:  # a parent's send is added before its children's receives
            kids = shape.children.get(node, [])
            if node == shape.root:
                for kid in kids:
                    b.add(node, "send", off, n, peer=kid, channel=channel)
                continue
            parent = shape.parent[node]
            if not kids:
                b.add(node, "recv", off, n, peer=parent, channel=channel)
                continue
            b.add(node, "recv_send", off, n, peer=parent, send_to=kids[0], channel=channel)
            for kid in kids[1:]:
                b.add(node, "send", off, n, peer=kid, channel=channel)


def emit_reduce(b: ScheduleBuilder, shape: TreeShape, offset: int, count: int, chunk_elems: int,
                channel: int) -> None:
    """Reduce ``[offset, offset + count)`` up ``shape`` (edges reversed) into the root, chunk by
    chunk; each inner node fuses its last child's reduction with the send to its parent."""
    postorder = list(reversed(shape.preorder))  # children before parents
    for off, n in chunk_ranges(offset, count, chunk_elems):
        for node in postorder:
            kids = shape.children.get(node, [])
            parent: Optional[int] = shape.parent.get(node)
            if parent is None:
                for kid in kids:
                    b.add(node, "recv_reduce", off, n, peer=kid, channel=channel)
            elif not kids:
                b.add(node, "send", off, n, peer=parent, channel=channel)
            else:
                for kid in kids[:-1]:
                    b.add(node, "recv_reduce", off, n, peer=kid, channel=channel)
                b.add(node, "recv_reduce_send", off, n, peer=kids[-1], send_to=parent, channel=channel)
