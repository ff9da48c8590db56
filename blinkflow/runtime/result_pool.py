"""Recycled, pre-faulted host memory for collective results (a caching allocator).

Every all-reduce returns a new array (the user may keep it; the shared buffer is reused by the
next collective). A fresh multi-megabyte numpy array is a fresh ``mmap``: its first write costs
one page fault per 4 KiB page, and on a virtual machine that dominated a 64 MiB all-reduce
(hundreds of milliseconds against tens for the reduction itself). PyTorch's caching allocator
solves the same problem; this is its minimal host-side form.

Blocks are private anonymous mappings that start on a 2 MiB boundary and ask for transparent huge
pages (``MADV_HUGEPAGE``, as numpy does for its own large arrays). Peers write results straight
into these blocks (:mod:`blinkflow.backends.cpu.cma`), and the kernel pins the target pages of
every such copy: on 4 KiB pages that, and the TLB misses of the reductions, made copies into a
result block half as fast as into a numpy array (measured: 8 MiB in 2.6 ms against 1.1-1.4 ms).
A shared mapping (``mmap(-1, n)``'s default) cannot have huge pages where ``shmem_enabled`` is
``never``, the common default; the result needs no sharing, so it is private.

A result is a numpy view of an anonymous ``mmap`` block owned by the pool. Every array made from
the block, and every view of those arrays, keeps a reference to the block (numpy's ``base``), so
the block is free exactly when the pool holds the only references to it. The pool only hands out
blocks from the runtime's background thread; a user thread dropping its last array concurrently
can only make a free block look busy for one more call, never the reverse.
"""
from __future__ import annotations

import contextlib
import mmap
import sys
from typing import List, Tuple

import numpy as np

PAGE = mmap.PAGESIZE
#: Transparent huge page size on x86-64 and most aarch64 kernels: blocks start on this boundary.
HUGE_PAGE = 2 << 20
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
        self._spans: List[Tuple[int, int]] = []  # (start, bytes) of each block's usable part

    @property
    def held_bytes(self) -> int:
        return sum(size for _, size in self._spans)

    def empty(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes`` (contents undefined); view it as the dtype you need."""
        if nbytes < MIN_POOLED_BYTES:
            return np.empty(nbytes, np.uint8)
        index = self._idle_index(nbytes)
        if index is not None:
            return self._view(index, nbytes)
        size = -(-nbytes // PAGE) * PAGE
        if self.held_bytes + size > self.capacity:
            self._drop_idle()
            if self.held_bytes + size > self.capacity:
                return np.empty(nbytes, np.uint8)  # every block is in the user's hands: don't grow
        block, start = _huge_block(size)
        np.frombuffer(block, np.uint8, size, start)[::PAGE] = 0  # fault every page in now, once
        self._blocks.append(block)
        self._spans.append((start, size))
        return self._view(len(self._blocks) - 1, nbytes)

    def _view(self, index: int, nbytes: int) -> np.ndarray:
        # The array's base is the mmap itself: the reference the idle check counts.
        return np.frombuffer(self._blocks[index], np.uint8, nbytes, self._spans[index][0])

    def _idle_index(self, nbytes: int):
        # An index, not the block: a local reference left behind would make the block look busy.
        # A block serves requests down to half its size, so one large block is not pinned by a
        # stream of small results.
        # (Not ``enumerate``: its reused result tuple holds one more reference to the block.)
        for i in range(len(self._blocks)):
            block = self._blocks[i]
            if nbytes <= self._spans[i][1] <= 2 * nbytes and sys.getrefcount(block) == _IDLE_REFS:
                return i
        return None

    def _drop_idle(self) -> None:
        busy = [sys.getrefcount(b) > _IDLE_REFS for b in self._blocks]
        self._blocks = [b for b, keep in zip(self._blocks, busy) if keep]
        self._spans = [s for s, keep in zip(self._spans, busy) if keep]


def _huge_block(size: int):
    """(mapping, offset): ``size`` private bytes starting on a huge-page boundary at ``offset``.

    The mapping is one huge page larger than asked, so that a boundary falls inside it wherever
    the kernel puts it; the slack is never touched, so it costs address space, not memory."""
    block = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = np.frombuffer(block, np.uint8, 1).__array_interface__["data"][0]
    start = -address % HUGE_PAGE
    advice = getattr(mmap, "MADV_HUGEPAGE", None)  # absent where the platform has no such advice
    if advice is not None:
        with contextlib.suppress(OSError):  # a kernel without transparent huge pages: plain pages
            block.madvise(advice, start, size)  # (size is whole pages: see ResultPool.empty)
    return block, start
