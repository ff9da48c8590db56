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

A result is a numpy array over a block the pool lends out: the pool marks the block lent when it
hands out the array, and a weak reference to that array marks it idle again when the array
dies (its callback; a plain ``weakref.ref`` held by the block, which costs the lend one C call
where ``weakref.finalize`` costs a few Python ones and a registry entry).
Every view made from the array (slices, reshapes, ``.view(dtype)``, a memoryview of it) keeps
the array alive (numpy's ``base`` chain stops at it: its own base is the block's memoryview, not
an array), so the callback runs exactly when the last of them is gone, in whichever thread drops
it. The pool only hands out blocks from the runtime's background thread; a user thread that
drops its last array concurrently can only make a free block look lent for one more call, never
the reverse.
"""
from __future__ import annotations

import contextlib
import mmap
import weakref
from typing import List, Optional

import numpy as np

PAGE = mmap.PAGESIZE
#: Transparent huge page size on x86-64 and most aarch64 kernels: blocks start on this boundary.
HUGE_PAGE = 2 << 20
#: Results smaller than this come from numpy directly: malloc's own caches serve them well.
MIN_POOLED_BYTES = 1 << 20
#: Lends after which an idle block that served none of them is released when a new block is
#: made: a training loop's results recur every step (a few lends apart), while results of sizes
#: that never recur (fusion batches of whatever happened to be ready) must not pile up idle.
IDLE_LENDS = 8


class Block:
    """One mapping of the pool: its usable span and whether an array of it is alive."""

    __slots__ = ("mapping", "start", "size", "lent", "last_lent", "watch")

    def __init__(self, mapping: mmap.mmap, start: int, size: int):
        self.mapping = mapping
        self.start = start
        self.size = size
        self.lent = False
        self.last_lent = 0
        """The pool's lend count when it was last lent."""
        self.watch: Optional[weakref.ref] = None
        """A weak reference to the array it is lent as, whose callback is :meth:`returned`."""

    def returned(self, _watch=None) -> None:
        """The array it was lent as died: nothing of it is alive any more."""
        self.lent = False


class ResultPool:
    """Hands out writable uint8 arrays backed by recycled blocks, up to ``capacity`` bytes in all."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.blocks: List[Block] = []
        self.lends = 0

    @property
    def held_bytes(self) -> int:
        return sum(block.size for block in self.blocks)

    def empty(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes`` (contents undefined); view it as the dtype you need."""
        if nbytes < MIN_POOLED_BYTES:
            return np.empty(nbytes, np.uint8)
        block = self._idle_block(nbytes)
        if block is not None:
            return self._lend(block, nbytes)
        size = -(-nbytes // PAGE) * PAGE
        self.blocks = [b for b in self.blocks if b.lent or self.lends - b.last_lent < IDLE_LENDS]
        if self.held_bytes + size > self.capacity:
            self.blocks = [b for b in self.blocks if b.lent]  # drop the idle ones
            if self.held_bytes + size > self.capacity:
                return np.empty(nbytes, np.uint8)  # every block is in the user's hands: don't grow
        mapping, start = _huge_block(size)
        np.frombuffer(mapping, np.uint8, size, start)[::PAGE] = 0  # fault every page in now, once
        block = Block(mapping, start, size)
        self.blocks.append(block)
        return self._lend(block, nbytes)

    def _lend(self, block: Block, nbytes: int) -> np.ndarray:
        array = np.frombuffer(block.mapping, np.uint8, nbytes, block.start)
        self.lends += 1
        block.lent, block.last_lent = True, self.lends
        block.watch = weakref.ref(array, block.returned)
        return array

    def _idle_block(self, nbytes: int):
        # A block serves requests down to half its size, so one large block is not pinned by a
        # stream of small results.
        for block in self.blocks:
            if not block.lent and nbytes <= block.size <= 2 * nbytes:
                return block
        return None


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
