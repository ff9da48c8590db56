"""Adasum: Horovod's adaptive summation, the policy's ``adasum`` algorithm.

Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021)
combines two gradients ``a`` and ``b`` as

    a' = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

so orthogonal gradients add and parallel ones average, and applies that pairwise over a tree of
ranks: ranks 2i and 2i+1 first, then the results of {0, 1} and {2, 3}, and so on, which needs a
power-of-two number of ranks. The dot products are per tensor, as Horovod does, also when many
tensors travel in one fused buffer.

:func:`allreduce` runs Horovod's bandwidth-lean form of that tree, vector halving and distance
doubling: at level ``L`` a rank swaps half of the range it owns with rank ``rank ^ L`` and keeps
the other half; the two halves' partial dot products and squared norms are summed over the
``2L`` ranks that now share the range (a butterfly: bitwise the same sum on each of them); each
rank combines its half; the ranges then travel back up the levels, so every element of the
result is computed by one rank and every rank ends with the same bits. Each rank sends and
receives about twice the buffer in all, as a ring all-reduce does.

This is a host path: numpy on host memory, MPI point-to-point messages over the job's (or process
set's) communicator under :data:`TAG`, which nothing else sends point-to-point on. A GPU tensor
is copied to the host and back. Statistics and the combination are computed in float64, as
Horovod accumulates them in double.

:func:`refusal` says why a call cannot run here, before it is submitted: integer and bool dtypes
(Adasum is a geometric combination of real vectors) and a number of ranks that is not a power of
two (Horovod refuses those too).
"""
from __future__ import annotations

import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np

FLOAT_DTYPES = ("float16", "float32", "float64")
TAG = 0xADA
"""The MPI tag of every Adasum message (sources are always named: no wildcard receives)."""
_TINY = np.sqrt(sys.float_info.min)
"""A squared norm below this counts as zero: that side's coefficient stays 1 (Horovod's guard)."""


def refusal(dtype_names: Sequence[str], size: int) -> Optional[str]:
    """Why an Adasum all-reduce of tensors of ``dtype_names`` cannot run over ``size`` ranks, or
    None. The same on every rank that submits the same call."""
    bad = sorted({d for d in dtype_names if d not in FLOAT_DTYPES})
    if bad:
        return (f"Adasum combines floating-point tensors ({', '.join(FLOAT_DTYPES)}), not {', '.join(bad)}; "
                "use Sum or Average for those tensors")
    if size < 1 or size & (size - 1):
        return (f"Adasum runs on a power-of-two number of ranks (1, 2, 4, 8, ...) and this call spans {size}; "
                "run it over a power-of-two number of ranks (a process set of 2, 4, ... members), or use Average")
    return None


def allreduce(comm, buf: np.ndarray, counts: Sequence[int]) -> None:
    """Replace ``buf`` (flat, host memory, tensors of ``counts`` elements back to back) by the Adasum
    of every rank's ``buf``, in place. Collective over ``comm``, whose size is a power of two."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1 or buf.size == 0:
        return
    bounds = np.concatenate(([0], np.cumsum(np.asarray(counts, dtype=np.int64))))
    received = np.empty_like(buf)
    lo, hi = 0, buf.size
    owned: List[Tuple[int, int, bool]] = []  # each level's range before halving, and which half was kept
    level = 1
    while level < size:
        partner = rank ^ level
        mid = lo + (hi - lo) // 2
        left = not rank & level  # this rank's subgroup is the lower one: its vector is ``a``
        keep, give = ((lo, mid), (mid, hi)) if left else ((mid, hi), (lo, mid))
        theirs = received[keep[0]:keep[1]]
        comm.Sendrecv(buf[give[0]:give[1]], dest=partner, sendtag=TAG, recvbuf=theirs, source=partner, recvtag=TAG)
        mine = buf[keep[0]:keep[1]]
        a, b = (mine, theirs) if left else (theirs, mine)
        spans = _spans(bounds, *keep)
        totals = _group_sum(comm, rank, level, _statistics(a, b, spans, len(counts)))
        _combine(a, b, spans, totals, out=mine)
        owned.append((lo, hi, left))
        lo, hi = keep
        level <<= 1
    while owned:  # back up the levels: each rank's finished range goes to the ranks that lack it
        level >>= 1
        partner = rank ^ level
        parent_lo, parent_hi, left = owned.pop()
        other = (hi, parent_hi) if left else (parent_lo, lo)
        comm.Sendrecv(buf[lo:hi], dest=partner, sendtag=TAG, recvbuf=buf[other[0]:other[1]], source=partner,
                      recvtag=TAG)
        lo, hi = parent_lo, parent_hi


def _spans(bounds: np.ndarray, lo: int, hi: int) -> List[Tuple[int, int, int]]:
    """(tensor, start, stop) of each tensor's non-empty part of [lo, hi), offsets relative to lo."""
    first = int(np.searchsorted(bounds, lo, side="right")) - 1
    out = []
    for t in range(max(first, 0), len(bounds) - 1):
        start, stop = max(lo, int(bounds[t])), min(hi, int(bounds[t + 1]))
        if start >= hi:
            break
        if stop > start:
            out.append((t, start - lo, stop - lo))
    return out


def _statistics(a: np.ndarray, b: np.ndarray, spans, ntensors: int) -> np.ndarray:
    """(ntensors, 3) float64: a.b, |a|^2, |b|^2 of each tensor's part in this range (zeros for the
    tensors that have none here: the group sum adds the other ranks' parts)."""
    stats = np.zeros((ntensors, 3), dtype=np.float64)
    for t, start, stop in spans:
        x = a[start:stop].astype(np.float64)
        y = b[start:stop].astype(np.float64)
        stats[t] = (x @ y, x @ x, y @ y)
    return stats


def _group_sum(comm, rank: int, level: int, stats: np.ndarray) -> np.ndarray:
    """``stats`` summed over the ``2 * level`` ranks that share this level's range (those equal to
    ``rank`` but in the low bits): a butterfly, whose every step adds the same two arrays on
    both sides in the same order, so every member gets the same bits."""
    theirs = np.empty_like(stats)
    step = 1
    while step <= level:
        partner = rank ^ step
        comm.Sendrecv(stats, dest=partner, sendtag=TAG, recvbuf=theirs, source=partner, recvtag=TAG)
        stats = stats + theirs if rank < partner else theirs + stats
        step <<= 1
    return stats


def _combine(a: np.ndarray, b: np.ndarray, spans, totals: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the pairwise Adasum of ``a`` and ``b``, tensor by tensor, with the whole
    tensors' statistics ``totals``."""
    for t, start, stop in spans:
        dot, anorm, bnorm = totals[t]
        acoeff = 1.0 - dot / anorm * 0.5 if anorm >= _TINY else 1.0
        bcoeff = 1.0 - dot / bnorm * 0.5 if bnorm >= _TINY else 1.0
        x = a[start:stop].astype(np.float64)
        y = b[start:stop].astype(np.float64)
        out[start:stop] = acoeff * x + bcoeff * y
