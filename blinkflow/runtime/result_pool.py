"""Recycled, pre-faulted host memory for collective results (a caching allocator).

Every all-reduce returns a new array (the user may keep it; the shared buffer is reused by the
next collective). A fresh multi-megabyte numpy array is a fresh ``mmap``: its first write costs
one page fault per 4 KiB page, and on a virtual machine that dominated a 64 MiB all-reduce
(hundreds of milliseconds against tens for the reduction itself). PyTorch's caching allocator
solves the same problem; this is its minimal host-side form.

A result is a numpy view of an anonymous ``mmap`` block owned by the pool. Every array made from
the block, and every view of those arrays, keeps a reference to the block (numpy's ``base``), so
the block is free exactly when the pool holds the only references to it. The pool only hands out
blocks from the runtime's background thread; a user thread dropping its last array concurrently
can only make a free block look busy for one more call, never the reverse.
"""
from __future__ import annotations

import mmap
import sys
from typing import List

import numpy as np

PAGE = mmap.PAGESIZE
#: Results smaller than this come from numpy directly: malloc's own caches serve them well.
MIN_POOLED_BYTES = 1 << 20
#: References to an idle block while the pool checks it: the list slot, one local name, and
#: getrefcount's own argument.
_IDLE_REFS = 3


class ResultPool:
    """Hands out writable uint8 arrays backed by recycled blocks, up to ``capacity`` bytes in all."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._blocks: List[mmap.mmap] = []

    @property
    def held_bytes(self) -> int:
        return sum(len(b) for b in self._blocks)

    def empty(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes`` (contents undefined); view it as the dtype you need."""
        if nbytes < MIN_POOLED_BYTES:
            return np.empty(nbytes, np.uint8)
        index = self._idle_index(nbytes)
        if index is not None:
            return np.frombuffer(self._blocks[index], np.uint8, nbytes)
        size = -(-nbytes // PAGE) * PAGE
        if self.held_bytes + size > self.capacity:
            self._drop_idle()
            if self.held_bytes + size > self.capacity:
                return np.empty(nbytes, np.uint8)  # every block is in the user's hands: don't grow
        block = mmap.mmap(-1, size)
        np.frombuffer(block, np.uint8)[::PAGE] = 0  # fault every page in now, once
        self._blocks.append(block)
        return np.frombuffer(block, np.uint8, nbytes)

    def _idle_index(self, nbytes: int):
        # An index, not the block: a local reference left behind would make the block look busy.
        # A block serves requests down to half its size, so one large block is not pinned by a
        # stream of small results.
        # (Not ``enumerate``: its reused result tuple holds one more reference to the block.)
        for i in range(len(self._blocks)):
            block = self._blocks[i]
            if nbytes <= len(block) <= 2 * nbytes and sys.getrefcount(block) == _IDLE_REFS:
                return i
        return None

    def _drop_idle(self) -> None:
        self._blocks = [b for b in self._blocks if sys.getrefcount(b) > _IDLE_REFS]

    def empty_like(self, array: np.ndarray) -> np.ndarray:
        """An uninitialised array of ``array``'s shape and dtype from the pool."""
        out = self.empty(array.nbytes).view(array.dtype)
        return out.reshape(array.shape)
