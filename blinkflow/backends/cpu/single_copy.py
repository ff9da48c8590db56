"""Phase 1 of the single-copy all-reduce: shards reduced chunk by chunk straight out of the
peers' memory (:mod:`.cma`), and on one host balanced between neighbouring ranks.

Every shard belongs to the root of a one-hop star (the cpu-host plan: a reduce-scatter, Blink's
phase 1 on a fully connected fabric). A chunk's value is ``owner's (+) kids[0]'s (+) kids[1]'s
...`` in that order whoever computes it, so every rank ends with the same bits. On one host the
rank that computes a chunk also writes it into every other rank's result (the all-gather rides
along while the chunk is in cache); across hosts the owners first all-reduce their shards with
the other hosts (:mod:`.cross`), so nothing is pushed here.

Balance. Ranks finish their shards at different times (a busy core, a noisy neighbour, a slower
path to memory), and the exit barrier makes every rank wait for the last: measured at 2 ranks on
the development VM, one rank's 16 MiB shard loop took 0.3-0.6 ms longer than the other's on most
calls. So a rank done with its own shard takes chunks from the far end of its neighbour's
(local rank + 1), as work-stealing deques hand out work: the owner commits to chunks from the
front, the helper from the back, and each publishes its commitment in the owner's control
segment (``FRONT``: by the owner only; ``BACK``: by the helper only) *before* doing the chunk.
Each side stops at the first chunk the other side has committed to as far as it can see. A value
read late is older, so each side under-estimates the other's progress: both may take the same
chunk, but no chunk is left out. Computing a chunk twice is harmless only because a result never
holds a partial value: both sides write, and push into each other's result, the same final bits
(:meth:`ChunkReducer.run`). The two sides still end up to one chunk apart (250-300 us at 16 MiB
there); finer chunks where they meet closed that gap without making the call faster on that VM,
whose ranks share one saturated memory system: while one waits, the other runs faster
(measured on the 2-core development VM).
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from . import cma
from .transport import scaled_copy

#: Bytes of a cache line (x86-64, most aarch64): the unit of copy alignment.
LINE = 64
_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
#: Where a rank's progress words sit, counted from the end of its control segment.
FRONT, BACK = 2, 1
PROGRESS_WORDS = 2


def l2_bytes(cache_dir: str = _CACHE_DIR) -> Optional[int]:
    """The L2 (data or unified) cache of CPU 0 in bytes, from sysfs; None where it cannot be read.
    CPU 0's on every rank, so the ranks of a host agree (the owner and its helper must cut a shard
    into the same chunks) even on CPUs whose cores differ."""
    try:
        for entry in sorted(os.listdir(cache_dir)):
            base = os.path.join(cache_dir, entry)
            if not entry.startswith("index"):
                continue
            with open(os.path.join(base, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(base, "type")) as f:
                kind = f.read().strip()
            if level == "2" and kind in ("Unified", "Data"):
                with open(os.path.join(base, "size")) as f:
                    size = f.read().strip()
                scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
                return int(size.rstrip("KkMmGg")) * scale
    except (OSError, ValueError):
        return None
    return None


class Segments:
    """This rank's own pieces as one virtual array: the views that cover an element range."""

    def __init__(self, pieces: Sequence[np.ndarray]):
        self.pieces = [p for p in pieces if p.shape[0]]
        self.starts = np.cumsum([0] + [p.shape[0] for p in self.pieces])
        self.whole: Optional[np.ndarray] = self.pieces[0] if len(self.pieces) == 1 else None
        """The one piece, when there is one (a large tensor: the common case): sliced directly."""

    def within(self, lo: int, hi: int):
        """(offset from ``lo``, view) for every piece overlapping elements ``[lo, hi)``."""
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        for i in range(first, len(self.pieces)):
            start = int(self.starts[i])
            if start >= hi:
                break
            a, b = max(lo, start), min(hi, int(self.starts[i + 1]))
            if a < b:
                yield a - lo, self.pieces[i][a - start:b - start]


class Landing:
    """Where a peer's chunk lands: views of a scratch buffer (``LINE`` bytes longer than a chunk)
    that start at the same offset within a cache line as the chunk's source. The kernel's copy
    between a peer's memory and ours runs about 1.5x faster between equally aligned addresses
    (measured: 8 MiB in 1.0-1.4 ms against 1.5-2.2 ms). A call's few views (a full chunk, the
    last one) are made once."""

    def __init__(self, scratch: np.ndarray, dtype: np.dtype):
        self.scratch = scratch
        self.dtype = dtype
        self.base = scratch.__array_interface__["data"][0]
        self._views = {}

    def at(self, source: int, nbytes: int) -> Tuple[np.ndarray, int]:
        """(view, its address) for ``nbytes`` coming from address ``source``."""
        item = self.dtype.itemsize
        shift = (source - self.base) % LINE // item * item
        view = self._views.get((shift, nbytes))
        if view is None:
            view = self._views[shift, nbytes] = self.scratch[shift:shift + nbytes].view(self.dtype)
        return view, self.base + shift


class ChunkReducer:
    """Computes chunks of one all-reduce's ``result`` (flat), each in the canonical order.

    Each chunk's bookkeeping is plain integers (one system call per move, no numpy object made
    per move): it runs right after the previous chunk's megabytes went through the caches, where
    every Python-level step costs several times its warm price."""

    def __init__(self, memory: cma.PeerMemory, pids: Sequence[int], me: int, result: np.ndarray,
                 pieces: Sequence[np.ndarray], tables: Sequence[cma.PieceTable], outs: Optional[Sequence[int]],
                 ufunc, scale: float, chunk: int, scratch: Tuple[np.ndarray, np.ndarray]):
        self.memory, self.pids, self.me = memory, pids, me
        self.result = result
        self.result_at = result.__array_interface__["data"][0]
        self.item = result.dtype.itemsize
        self.chunk = chunk
        """Elements per chunk (at most ``cma.MAX_CALL_BYTES``: one system call moves one)."""
        self.own = Segments(pieces)
        self.tables = tables
        self.outs = outs
        """Every local rank's result address: push each chunk there (None: across hosts, later)."""
        self.ufunc = ufunc
        self.scale = scale
        self._landings = [Landing(s, result.dtype) for s in scratch]

    def chunks(self, offset: int, count: int) -> List[Tuple[int, int]]:
        """The element ranges of the chunks of ``[offset, offset + count)``."""
        return [(lo, min(offset + count, lo + self.chunk)) for lo in range(offset, offset + count, self.chunk)]

    def run(self, owner: int, kids: Sequence[int], lo: int, hi: int) -> None:
        """``result[lo:hi] = (owner's (+) kids[0]'s (+) ...) * scale``, then pushed into every
        other local rank's result (with ``outs``). ``kids`` is never empty (a host of one rank
        does not take this path).

        ``result[lo:hi]`` only ever receives the chunk's final bits: partial values build up in
        scratch and the last step writes the result. Another rank may compute the same chunk (an
        owner and its helper, see :func:`reduce_balanced`) and push its final bits here at any
        moment; were partial values kept in the result, that push could land between two steps,
        and the next step would combine a peer's slice into a finished chunk a second time
        (a Sum counting one rank twice; a scale applied twice)."""
        ufunc, me = self.ufunc, self.me
        o = self.result[lo:hi]
        first, last = lo * self.item, hi * self.item
        order = (owner,) + tuple(kids)
        scaled = self.scale != 1.0
        last_step = None if scaled else len(order) - 1  # the step that writes the result
        # The partial value: where the first peer's slice lands (scratch 0), or there at the
        # result's offset within a cache line (the final scaling then copies between equally
        # aligned addresses); the other peers' slices land in scratch 1.
        if owner == me:
            acc = self._landings[0].at(self.result_at + first, last - first)[0]
        else:
            acc = self._pull(owner, first, last, 0)
        out = o if last_step == 1 else acc
        if owner == me:
            self._own_then(out, lo, hi, self._pull(order[1], first, last, 1))
        elif order[1] == me:
            self._own_after(out, lo, hi, acc)
        else:
            ufunc(acc, self._pull(order[1], first, last, 1), out=out)
        for step in range(2, len(order)):
            q, out = order[step], o if last_step == step else acc
            if q == me:
                self._own_after(out, lo, hi, acc)
            else:
                ufunc(acc, self._pull(q, first, last, 1), out=out)
        if scaled:
            scaled_copy(acc, o, self.scale)
        if self.outs is not None:
            write, pids, outs = self.memory.write_span, self.pids, self.outs
            for q in order:
                if q != me:
                    write(pids[q], self.result_at + first, last - first, outs[q] + first)

    def _own_then(self, o: np.ndarray, lo: int, hi: int, value: np.ndarray) -> None:
        """``o = mine (+) value``."""
        whole = self.own.whole
        if whole is not None:
            self.ufunc(whole[lo:hi], value, out=o)
            return
        for at, mine in self.own.within(lo, hi):
            self.ufunc(mine, value[at:at + mine.shape[0]], out=o[at:at + mine.shape[0]])

    def _own_after(self, o: np.ndarray, lo: int, hi: int, value: np.ndarray) -> None:
        """``o = value (+) mine``."""
        whole = self.own.whole
        if whole is not None:
            self.ufunc(value, whole[lo:hi], out=o)
            return
        for at, mine in self.own.within(lo, hi):
            self.ufunc(value[at:at + mine.shape[0]], mine, out=o[at:at + mine.shape[0]])

    def _pull(self, q: int, first: int, last: int, landing: int) -> np.ndarray:
        """Bytes ``[first, last)`` of local rank ``q``'s pieces, landed in scratch ``landing``."""
        table, nbytes = self.tables[q], last - first
        source = table.span(first, last)
        if source is not None:
            view, at = self._landings[landing].at(source, nbytes)
            self.memory.read_span(self.pids[q], at, nbytes, source)
            return view
        runs = table.runs(first, last)  # the chunk spans several of the peer's tensors
        view, _ = self._landings[landing].at(int(runs[0, 0]), nbytes)
        self.memory.read(self.pids[q], view, runs)
        return view


def reduce_balanced(reducer: ChunkReducer, words: Sequence[memoryview], by_owner, shards) -> int:
    """Reduce this rank's shard from the front, then help its neighbour from the back (see the
    module docstring); returns how many of the neighbour's chunks this rank did. ``by_owner``:
    local rank -> (tree, kids) of the one star it owns, tree ``t`` owning ``shards[t]``;
    ``words``: every local rank's control segment, whose progress words its owner set (FRONT 0,
    BACK its chunk count) before the entry barrier."""
    me = reducer.me
    tree, kids = by_owner[me]
    mine = reducer.chunks(*shards[tree])
    progress = words[me]
    front, back = len(progress) - FRONT, len(progress) - BACK
    for i, (lo, hi) in enumerate(mine):
        if i >= progress[back]:
            break  # the helper has it
        progress[front] = i + 1
        reducer.run(me, kids, lo, hi)
    neighbour = (me + 1) % len(words)
    if neighbour == me:
        return 0
    tree, kids = by_owner[neighbour]
    theirs, progress = reducer.chunks(*shards[tree]), words[neighbour]
    helped = 0
    for j in range(len(theirs) - 1, -1, -1):
        if j < progress[front]:
            break  # the owner has it
        progress[back] = j
        reducer.run(neighbour, kids, *theirs[j])
        helped += 1
    return helped


def progress_start(words: memoryview, chunks: int) -> None:
    """Set this rank's progress words for a call: nothing done from the front, nothing taken
    from the back (``chunks`` in its shard). Before the entry barrier."""
    words[len(words) - FRONT] = 0
    words[len(words) - BACK] = chunks
