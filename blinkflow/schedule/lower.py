"""Lowering: a :class:`Plan` and a buffer size become a :class:`Schedule` (the IR every executor
and the simulator run).

Each tree ``i`` gets the element range that :func:`aligned_split` gives its fraction, runs on its
own channel ``i``, and streams that range in chunks of ``chunk_elems`` (Blink MLSys 2020 §4):

* broadcast — down every tree from the root;
* reduce — up every tree (edges reversed) into the root;
* all-reduce — up each tree into its root, then back down the same tree (Blink's
  reduce-broadcast; with trees rooted everywhere this is ForestColl's reduce-scatter + all-gather);
* all-gather / reduce-scatter — device ``d`` owns shard ``d`` (``shard_counts``, an equal split by
  default); the trees rooted at ``d`` broadcast (all-gather) or reduce into (reduce-scatter) it;
* three-phase all-reduce across hosts (Blink §5) — each host reduces its intra trees' ranges into
  their roots, the roots holding the same range on every host all-reduce it over the ``cross``
  plans, then each host broadcasts down its intra trees.

Alignment: every range starts on a multiple of :data:`SPAN_ALIGN_ELEMS` elements (where the
caller's shard allows it), the split rounded down to whole units and the remainder given to the
last range. 16 elements are 16 bytes of a 1-byte dtype and a whole number of 16-byte words of
every wider one, so one schedule (cached by element count, shared by every dtype) keeps each span
start 16-byte aligned: a GPU kernel then moves it with 16-byte vector loads, where a misaligned
span falls back to scalar loads (4x the instructions for float32, 8x for float16), as NCCL's
Simple protocol avoids by aligning its chunks (``prims_simple.h``). The policy's chunks are
multiples of the same unit (:meth:`~.policy.Choice.chunk_elems`), so every chunk start is aligned
too.

Bitwise reproducibility: every range is reduced once, at its tree root, in the order fixed by the
tree's edges (see :mod:`.emit`); all other ranks receive copies of those bytes.

Lowering is deterministic and linear in the number of steps; executors call it per fusion
buffer size and cache the result.
"""
from __future__ import annotations

import itertools
from typing import List, Optional, Sequence, Tuple

from ..errors import PlanError, ScheduleError
from ..planner.plan import Plan, Tree, split_counts
from .builder import ScheduleBuilder
from .emit import TreeShape, emit_broadcast, emit_reduce
from .ir import Schedule

#: Default chunk: 1 Mi elements (4 MiB of float32). The simulator tunes it per size (MIAD); an
#: executor may pass its own.
DEFAULT_CHUNK_ELEMS = 1 << 20
ALIGN_BYTES = 16
"""The alignment of a 16-byte vector load (``int4``/``uint4`` in CUDA)."""
SPAN_ALIGN_ELEMS = ALIGN_BYTES
"""Element unit every tree range starts on: :data:`ALIGN_BYTES` elements, which are a multiple
of :data:`ALIGN_BYTES` bytes for every itemsize (1, 2, 4, 8)."""
_TOL = 1e-9


def aligned_split(fractions: Sequence[float], offset: int, count: int,
                  align: int = SPAN_ALIGN_ELEMS) -> List[int]:
    """Split ``[offset, offset + count)`` in proportion to ``fractions`` so that every part but
    the first starts on a multiple of ``align`` (the first starts at ``offset``, which the caller
    chose): the elements up to the first aligned index go to the first part, whole units of
    ``align`` are shared by largest remainder (:func:`split_counts`), and the remainder after the
    last whole unit goes to the last part.

    >>> aligned_split([0.5, 0.5], 0, 100, 16)
    [48, 52]
    >>> aligned_split([1, 1, 1], 5, 100, 16)
    [43, 32, 25]
    """
    if align < 1:
        raise ScheduleError(f"align must be >= 1, got {align}")
    head = min(count, -offset % align)
    units = (count - head) // align
    counts = [u * align for u in split_counts(fractions, units)]
    counts[0] += head
    counts[-1] += count - head - units * align
    return counts


def lower(plan: Plan, nelems: int, chunk_elems: Optional[int] = None,
          shard_counts: Optional[Sequence[int]] = None, align: int = SPAN_ALIGN_ELEMS) -> Schedule:
    """The schedule of ``plan`` for a buffer of ``nelems`` elements.

    ``chunk_elems`` is the pipelining unit (default ``min(nelems, DEFAULT_CHUNK_ELEMS)``).
    ``shard_counts`` gives every device's shard, in ``plan.devices`` order, for all-gather and
    reduce-scatter (default: ``nelems`` split as evenly as possible, extra elements first).
    ``align`` is the element unit tree ranges start on (:func:`aligned_split`; 1 splits at
    element granularity).

    >>> from blinkflow.planner import Plan, Tree
    >>> p = Plan("broadcast", "t", (0, 1, 2), (Tree(0, 1.0, ((0, 1), (1, 2))),), 1.0, 1.0, root=0)
    >>> s = lower(p, 8, chunk_elems=4)
    >>> [(st.op, st.offset, st.round) for st in s.program(1)]
    [('recv_send', 0, 1), ('recv_send', 4, 1)]
    """
    if not isinstance(nelems, int) or isinstance(nelems, bool) or nelems < 0:
        raise ScheduleError(f"nelems must be an integer >= 0, got {nelems!r}")
    if chunk_elems is None:
        chunk_elems = max(1, min(nelems, DEFAULT_CHUNK_ELEMS))
    if not isinstance(chunk_elems, int) or isinstance(chunk_elems, bool) or chunk_elems < 1:
        raise ScheduleError(f"chunk_elems must be an integer >= 1, got {chunk_elems!r}")
    if not isinstance(align, int) or isinstance(align, bool) or align < 1:
        raise ScheduleError(f"align must be an integer >= 1, got {align!r}")
    if plan.is_three_phase:
        return _lower_three_phase(plan, nelems, chunk_elems, align)
    if not plan.trees:
        raise PlanError(f"plan for {plan.collective} has no trees")
    b = ScheduleBuilder(plan.collective, plan.devices, nelems)
    shapes = [TreeShape.of(t, plan.devices, f"tree {i}") for i, t in enumerate(plan.trees)]
    coll = plan.collective
    if coll in ("broadcast", "reduce"):
        root = plan.root if plan.root is not None else plan.trees[0].root
        for i, t in enumerate(plan.trees):
            if t.root != root:
                raise PlanError(f"{coll} plan rooted at {root} has tree {i} rooted at {t.root}")
        emit = emit_broadcast if coll == "broadcast" else emit_reduce
        for i, (shape, (off, n)) in enumerate(zip(shapes, _ranges(plan.trees, 0, nelems, align))):
            emit(b, shape, off, n, chunk_elems, i)
        return b.build(chunk_elems, root=root, fabrics=_fabrics(plan.trees))
    if coll == "allreduce":
        for i, (shape, (off, n)) in enumerate(zip(shapes, _ranges(plan.trees, 0, nelems, align))):
            emit_reduce(b, shape, off, n, chunk_elems, i)
            emit_broadcast(b, shape, off, n, chunk_elems, i)
        return b.build(chunk_elems, fabrics=_fabrics(plan.trees))
    # all-gather / reduce-scatter: the trees rooted at each device carry that device's shard.
    shards = _shards(plan.devices, nelems, shard_counts)
    emit = emit_broadcast if coll == "allgather" else emit_reduce
    for device, off, n in shards:
        mine = [i for i, t in enumerate(plan.trees) if t.root == device]
        if n and not mine:
            raise PlanError(f"{coll} plan has no tree rooted at device {device}, which owns a shard")
        if not n:
            continue
        sub = [plan.trees[i] for i in mine]
        for i, (o, c) in zip(mine, _ranges(sub, off, n, align)):
            emit(b, shapes[i], o, c, chunk_elems, i)
    return b.build(chunk_elems, shards=tuple(shards), fabrics=_fabrics(plan.trees))


def _ranges(trees: Sequence[Tree], offset: int, count: int, align: int) -> List[Tuple[int, int]]:
    """Consecutive element ranges of ``[offset, offset + count)`` in proportion to the fractions,
    each after the first starting on a multiple of ``align``."""
    counts = aligned_split([t.fraction for t in trees], offset, count, align)
    starts = [offset + s for s in itertools.accumulate([0] + counts[:-1])]
    return list(zip(starts, counts))


def _fabrics(trees: Sequence[Tree]) -> Tuple[str, ...]:
    return tuple(t.channel for t in trees)


def _shards(devices: Sequence[int], nelems: int, shard_counts) -> List[Tuple[int, int, int]]:
    if shard_counts is None:
        counts = split_counts([1.0] * len(devices), nelems)
    else:
        counts = list(shard_counts)
        if len(counts) != len(devices) or any(c < 0 for c in counts) or sum(counts) != nelems:
            raise ScheduleError(f"shard_counts {counts} must give one count >= 0 per device "
                                f"({len(devices)}) summing to nelems={nelems}")
    offsets = itertools.accumulate([0] + counts[:-1])
    return [(d, o, c) for d, o, c in zip(devices, offsets, counts)]


# ---- three-phase all-reduce (Blink §5) --------------------------------------------------------
def _lower_three_phase(plan: Plan, nelems: int, chunk_elems: int, align: int) -> Schedule:
    if plan.collective != "allreduce":
        raise PlanError(f"three-phase plans are all-reduce plans, not {plan.collective}")
    groups = sorted(plan.cross, key=lambda g: g.start)
    boundary = _boundaries(plan, groups, nelems, align)
    b = ScheduleBuilder("allreduce", plan.devices, nelems)
    # Phase 1: every host reduces each intra tree's range into the tree's root.
    intra_ranges: List[List[Tuple[TreeShape, int, int]]] = []
    for h, p in enumerate(plan.intra):
        if not p.trees:
            raise PlanError(f"intra plan of host {h} has no trees")
        total = sum(t.fraction for t in p.trees)
        cuts = [0.0] + [c / total for c in itertools.accumulate(t.fraction for t in p.trees)]
        rows = []
        for i, t in enumerate(p.trees):
            shape = TreeShape.of(t, p.devices, f"intra plan {h} tree {i}")
            lo, hi = boundary(cuts[i]), boundary(cuts[i + 1])
            rows.append((shape, lo, hi))
            if hi > lo:
                emit_reduce(b, shape, lo, hi - lo, chunk_elems, i)
        intra_ranges.append(rows)
    base = max(len(p.trees) for p in plan.intra)
    fabrics = [t.channel for t in max(plan.intra, key=lambda p: len(p.trees)).trees]
    # Phase 2: the devices holding the same range on every host all-reduce it among themselves.
    if len(plan.intra) > 1:
        expected = 0.0
        for g in groups:
            if abs(g.start - expected) > _TOL or g.stop <= g.start:
                raise PlanError(f"cross groups must tile [0, 1) in order; a group starts at {g.start} "
                                f"where {expected} was expected")
            expected = g.stop
        if abs(expected - 1.0) > _TOL:
            raise PlanError(f"cross groups cover [0, {expected}) instead of [0, 1)")
    for k, g in enumerate(groups):
        lo, hi = boundary(g.start), boundary(g.stop)
        _check_group_holders(g, k, lo, hi, plan.intra, intra_ranges)
        if hi <= lo or len(g.devices) < 2:
            continue
        if g.plan.collective != "allreduce" or not g.plan.trees:
            raise PlanError(f"cross group {k} needs an all-reduce plan with trees")
        for i, (t, (off, n)) in enumerate(zip(g.plan.trees, _ranges(g.plan.trees, lo, hi - lo, align))):
            shape = TreeShape.of(t, g.devices, f"cross group {k} tree {i}")
            emit_reduce(b, shape, off, n, chunk_elems, base + i)
            emit_broadcast(b, shape, off, n, chunk_elems, base + i)
            if len(fabrics) <= base + i:
                fabrics.append(t.channel)
        base += len(g.plan.trees)
    # Phase 3: every host broadcasts each intra tree's (now globally reduced) range down it.
    for rows in intra_ranges:
        for i, (shape, lo, hi) in enumerate(rows):
            if hi > lo:
                emit_broadcast(b, shape, lo, hi - lo, chunk_elems, i)
    return b.build(chunk_elems, fabrics=tuple(fabrics))


def _boundaries(plan: Plan, groups, nelems: int, align: int):
    """Map every fraction cut of the intra trees and cross groups to one element index, with
    :func:`aligned_split` over the merged cuts, so ranges of different phases line up exactly
    (and start aligned)."""
    cuts = [0.0, 1.0]
    for p in plan.intra:
        total = sum(t.fraction for t in p.trees) or 1.0
        cuts += [c / total for c in itertools.accumulate(t.fraction for t in p.trees)]
    for g in groups:
        cuts += [g.start, g.stop]
    merged: List[float] = []
    for c in sorted(min(max(c, 0.0), 1.0) for c in cuts):
        if not merged or c - merged[-1] > _TOL:
            merged.append(c)
    merged[-1] = 1.0
    pieces = [b - a for a, b in zip(merged[:-1], merged[1:])]
    bounds = list(itertools.accumulate([0] + aligned_split(pieces, 0, nelems, align))) if pieces else [0, nelems]

    def boundary(f: float) -> int:
        i = min(range(len(merged)), key=lambda j: abs(merged[j] - f))
        return bounds[i]
    return boundary


def _check_group_holders(g, k: int, lo: int, hi: int, intra: Sequence[Plan],
                         intra_ranges: Sequence[Sequence[Tuple[TreeShape, int, int]]]) -> None:
    """After phase 1 each intra tree's range sits at that tree's root: the group's device on
    every host must be that root for every range the group covers."""
    if len(g.devices) != len(intra):
        raise PlanError(f"cross group {k} has {len(g.devices)} devices for {len(intra)} hosts")
    for h, (p, rows) in enumerate(zip(intra, intra_ranges)):
        mine = [d for d in g.devices if d in p.devices]
        if len(mine) != 1:
            raise PlanError(f"cross group {k} must have exactly one device on host {h}, has {mine}")
        for shape, a, b in rows:
            if a < hi and lo < b and shape.root != mine[0]:
                raise PlanError(f"cross group {k} uses device {mine[0]} on host {h}, but elements "
                                f"[{max(a, lo)}, {min(b, hi)}) are reduced into device {shape.root}")
