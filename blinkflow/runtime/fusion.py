"""Tensor fusion: many small all-reduces become one collective on one buffer.

Every rank groups the same ordered list of responses the same way (the grouping is a pure
function of the responses and the threshold), so no extra message is needed to agree on it.
The unit of fusion is a :class:`Piece`, one tensor: a whole all-reduce response, or one member
of a grouped one (a group may mix dtypes, and may be larger than the threshold). Pieces fuse
when they share dtype, reduce op, scale factors and device, up to ``threshold`` bytes per batch;
a tensor larger than the threshold runs alone (the backend buffer grows to fit it). Other
collectives run one by one.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from .messages import Kind, Response


class Piece(NamedTuple):
    """One tensor of a cycle's responses (a tuple: a step makes hundreds of them)."""

    response: int
    """Position of its response in the cycle's list."""
    member: int
    """Its position in a grouped all-reduce (0 otherwise)."""
    dtype: str
    shape: Tuple[int, ...]
    size: int
    """Elements."""


@dataclasses.dataclass
class Batch:
    """What runs as one collective: fused all-reduce pieces, or one other response (one piece).

    The layout below is computed once per batch: the executor reuses a cycle's batches while the
    same responses come back from the response cache (every step of a training loop)."""

    kind: Kind
    pieces: List[Piece]
    members: int = 0
    """How many pieces the response of the first piece has in all (for :attr:`whole`)."""

    @functools.cached_property
    def responses(self) -> List[int]:
        """Indexes of the responses with pieces here, in order."""
        return list(dict.fromkeys(p.response for p in self.pieces))

    @functools.cached_property
    def whole(self) -> Optional[int]:
        """The all-reduce response whose pieces these are, all of them in order (a group that fits
        one batch: the common case), else None."""
        first = self.pieces[0].response
        in_order = all(p.response == first and p.member == m for m, p in enumerate(self.pieces))
        return first if self.kind is Kind.ALLREDUCE and len(self.pieces) == self.members and in_order else None

    @functools.cached_property
    def views(self) -> Tuple[List[slice], List[Tuple[int, Tuple[int, ...]]]]:
        """Where each piece's result lies in the batch's flat result, and (index, shape) of the
        pieces whose shape is not that slice's own (not one-dimensional): only they need a
        reshape (a reshape costs as much as the slice; biases and norms are one-dimensional)."""
        starts = offsets([p.size for p in self.pieces])
        return ([slice(start, start + p.size) for start, p in zip(starts, self.pieces)],
                [(i, p.shape) for i, p in enumerate(self.pieces) if len(p.shape) != 1])

    @functools.cached_property
    def total(self) -> int:
        return sum(p.size for p in self.pieces)


def pieces_of(index: int, response: Response) -> List[Piece]:
    """The tensors ``response`` moves: one per group member, else one."""
    if response.kind is not Kind.ALLREDUCE:
        return [Piece(index, 0, "", (), 0)]  # runs whole: the executor reads the response itself
    return [Piece(index, m, dtype, shape, math.prod(shape))
            for m, (dtype, shape) in enumerate(response.first().members())]


def make_batches(responses: List[Response], threshold: int) -> List[Batch]:
    """Group the pieces of ``responses`` into batches that each run as one collective.

    Batches keep the order of their first piece; an all-reduce piece joins the earliest open
    batch of its key that still has room, so interleaved dtypes still fuse. A response with no
    pieces (an empty group) is in no batch.
    """
    batches: List[Batch] = []
    open_batches = {}  # fusion key -> [batch, bytes so far]
    for index, response in enumerate(responses):
        if response.kind is not Kind.ALLREDUCE:
            batches.append(Batch(response.kind, pieces_of(index, response)))
            continue
        r = response.first()
        common = (r.op, r.prescale, r.postscale, r.device)
        for piece in pieces_of(index, response):
            key = (piece.dtype, common)
            nbytes = piece.size * _itemsize(piece.dtype)
            current = open_batches.get(key)
            if current is not None and current[1] + nbytes <= threshold:
                current[0].pieces.append(piece)
                current[1] += nbytes
                continue
            batch = Batch(Kind.ALLREDUCE, [piece], len(r.members()))
            batches.append(batch)
            if nbytes < threshold:  # a tensor that fills the buffer alone leaves the open batch open
                open_batches[key] = [batch, nbytes]
    return batches


@functools.lru_cache(maxsize=None)
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def offsets(sizes: List[int]) -> List[int]:
    """Start of each tensor in the fused buffer (elements)."""
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += n
    return out
