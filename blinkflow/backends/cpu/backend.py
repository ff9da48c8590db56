"""The CPU executor: numpy over MPI shared memory inside a host, MPI point-to-point across hosts.

All-reduce follows Blink's three-phase protocol (MLSys 2020, §5):

1. intra-host reduce over the host plan's trees: each tree root ends up owning its shard,
   reduced over the host (a cpu-host plan is one one-hop star per rank: a reduce-scatter);
2. cross-host all-reduce of each shard among its owners on every host (``cross_comm``);
3. intra-host broadcast down the same trees (an all-gather for stars).

Inside a host no data goes through MPI: ranks read each other's segments of a shared window
(:mod:`.shm`) and synchronise with barriers on ``local_comm`` between levels. Every call is
collective over ``comm`` and made in the same order on every rank (the runtime's contract).
"""
from __future__ import annotations

import array
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp
from ..base import Backend, BackendContext
from . import cma, kernels, single_copy
from .cross import CrossAllreduce, Scratch
from .shm import SharedArena
from .trees import LocalTrees, local_trees, single_root_star

_NOT_SHARED = -1
#: Bytes of the control window per rank: where its tensors are, for peers reading them in place.
_CONTROL_BYTES = 1 << 20
#: Reading tensors in place pays system calls, page pinning and a second barrier: it wins only for
#: shards of at least this many bytes (measured at 2 and 4 ranks: level at 4 MiB shards, 13-25 %
#: faster at 8-16 MiB, slower below) and tensors of at least 64 KiB on average (below, a system
#: call per tensor and chunk costs more than packing them). The same answer on every rank: sizes
#: and shapes are.
MIN_SINGLE_COPY_SHARD_BYTES = 4 * 1024 * 1024
MIN_SINGLE_COPY_PIECE_BYTES = 64 * 1024


def _scaled_copy(src: np.ndarray, dst: np.ndarray, scale: float) -> None:
    """``dst = src * scale`` in one pass (a plain copy when ``scale`` is 1)."""
    if scale == 1.0:
        np.copyto(dst, src)
    else:
        np.multiply(src, dst.dtype.type(scale), out=dst)


def _flat(arr) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise BackendError(f"the cpu backend works on numpy arrays, got {type(arr).__name__}")
    if not arr.flags.c_contiguous:
        raise BackendError("the cpu backend needs C-contiguous buffers")
    return arr.reshape(-1)


def _bytes(arr: np.ndarray):
    from mpi4py import MPI

    return [arr.view(np.uint8), MPI.BYTE]


class CpuBackend(Backend):
    """Collectives on numpy buffers for ranks that share a host's memory (and MPI across hosts)."""

    name = "cpu"

    def __init__(self, ctx: BackendContext):
        self.ctx = ctx
        self.comm = ctx.comm
        self.local = ctx.local_comm
        self.cross = ctx.cross_comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.lrank, self.lsize = self.local.Get_rank(), self.local.Get_size()
        self.chunk_bytes = ctx.config.chunk_bytes if ctx.config is not None else 0
        self.arena = SharedArena(self.local)
        self.scratch = Scratch()  # receive buffer of the cross-host phase
        self.aside = Scratch()  # private copies made by the collectives themselves
        self._trees: Optional[LocalTrees] = None
        self._levels: Tuple[list, list] = ([], [])
        self._forwards: set = set()
        self._stars_by_owner: Optional[dict] = None  # see _allreduce_trees
        self._cross: Optional[CrossAllreduce] = None
        self._loc = np.zeros(3, dtype=np.int64)  # (window, byte offset, bytes) of our argument
        self._locs = np.zeros((self.lsize, 3), dtype=np.int64)
        # Who is where: (local rank, local size, cross rank) of every rank, once.
        self.places: List[Tuple[int, int, int]] = self.comm.allgather(
            (self.lrank, self.lsize, self.cross.Get_rank()))
        self.local_ranks: List[int] = self.local.allgather(self.rank)  # global rank of each local rank
        self.nhosts = sum(1 for lr, _, _ in self.places if lr == 0)
        self.even = len({ls for _, ls, _ in self.places}) == 1
        # Reading peers' tensors in place (one copy fewer), where every local rank can.
        self.peer_memory: Optional[cma.PeerMemory] = None
        self.local_pids: List[int] = []
        if self.lsize > 1 and (ctx.config is None or ctx.config.cpu_single_copy):
            self.peer_memory, self.local_pids = cma.probe(self.local)
        if self.nhosts > 1:
            # Across hosts the single-copy path ends in one collective over every rank (_exit),
            # so every host must choose it for the same calls: hosts of one size (its size
            # threshold scales with the host's ranks) that can all read their ranks' memory.
            # Otherwise a host that packs would leave the others waiting in that collective.
            from mpi4py import MPI

            everywhere = self.comm.allreduce(int(self.peer_memory is not None), op=MPI.MIN)
            if self.peer_memory is not None and not (everywhere and self.even):
                self.peer_memory = None
                cma.disallow_peers()
        self._tmp = (Scratch(), Scratch())  # chunks of peers' tensors on their way into a reduction
        self.stats = {"single_copy": 0, "packed": 0, "helped_chunks": 0}
        """All-reduces of pieces by path, and chunks done for a slower neighbour (tests, debugging)."""
        self._flag = np.zeros(1, np.int8)  # the single-copy path's exit: did some rank fail?
        self._words: Optional[List[memoryview]] = None  # control segments, see _publish
        self._syncs = 0  # full barriers of local_comm so far
        self._syncs_at_buffer = -1
        self._closed = False

    # ---- plan --------------------------------------------------------------------------------
    def _allreduce_trees(self) -> LocalTrees:
        """The host's all-reduce trees in local ranks, made once. All hosts must run the same
        shape for phase 2 (shard i owned by local rank root_i everywhere); if they do not (or
        hosts have different rank counts) every host reduces to local rank 0 instead."""
        if self._trees is None:
            plan = None
            if self.ctx.plan_for is not None:
                plan = self.ctx.plan_for("allreduce")
            devices = list(self.ctx.devices) if self.ctx.devices else list(range(self.size))
            trees = local_trees(plan, [devices[g] for g in self.local_ranks])
            if self.nhosts > 1:
                signatures = self.comm.allgather(trees.signature if self.even else None)
                if any(s is None or s != signatures[0] for s in signatures):
                    trees, plan = single_root_star(self.lsize), None
            self._cross = CrossAllreduce(self.cross, plan, devices[self.rank], devices, self.places, self.chunk_bytes)
            self._trees = trees
            self._levels = (trees.reduce_levels(), trees.broadcast_levels())
            # Trees in which this rank forwards to children: it must keep their shards in its
            # shared segment, where the children read them.
            self._forwards = {tree for level in self._levels[1] for tree, _, parent in level if parent == self.lrank}
            # One host, one one-hop star per local rank: ranks help their neighbours finish
            # (single_copy.reduce_balanced), given each rank's star by its owner.
            stars = self._levels[0][0] if len(self._levels[0]) == 1 else []
            owners = {node: (tree, kids) for tree, node, kids in stars}
            self._stars_by_owner = owners if self.nhosts == 1 and len(stars) == len(owners) == self.lsize else None
        return self._trees

    # ---- shared-memory plumbing ----------------------------------------------------------------
    def buffer(self, nelems: int, dtype):
        """Collective over the host's ranks, with the same ``nelems`` on each (the runtime's fused
        batches agree). Slots alternate, so the slot handed out now was last read by peers two
        calls ago; the barrier below runs only if no collective synchronised the host since
        the previous ``buffer`` call (the runtime never lets that happen)."""
        dtype = np.dtype(dtype)
        nbytes = int(nelems) * dtype.itemsize
        if self._syncs == self._syncs_at_buffer:
            self._sync()
        self._syncs_at_buffer = self._syncs
        return self.arena.user_slot(nbytes).view(dtype)

    def _sync(self) -> None:
        """A barrier of the host's ranks (counted: see :meth:`buffer`)."""
        self.local.Barrier()
        self._syncs += 1

    def _share(self, arr: np.ndarray, needed: Sequence[bool], stage: bool = False) -> np.ndarray:
        """Make ``arr`` readable by the local peers; returns every local rank's (window, offset).
        ``stage``: peers read a staged copy even if ``arr`` sits in a shared window (the caller
        writes over it before they are done).

        One Allgather on ``local_comm`` doubles as the entry barrier (peers finished packing).
        An argument outside the shared windows is copied into the staging window, only when a
        peer needs to read it (``needed[local rank]``); the sizes travel in the same Allgather,
        so every rank sizes the staging window alike without another collective.
        """
        win, off = (_NOT_SHARED, 0) if stage else self.arena.locate(arr)
        self._loc[0], self._loc[1], self._loc[2] = win, off, arr.nbytes
        if self.lsize == 1:
            self._locs[0] = self._loc
            return self._locs
        self.local.Allgather(self._loc, self._locs)
        self._syncs += 1
        missing = [q for q in range(self.lsize) if needed[q] and self._locs[q, 0] == _NOT_SHARED]
        if missing:
            staging = self.arena.staging(max(int(self._locs[q, 2]) for q in missing))
            index = self.arena.windows.index(staging)
            if self.lrank in missing:
                np.copyto(staging.mine[:arr.nbytes], arr.view(np.uint8))
            for q in missing:
                self._locs[q, :2] = (index, 0)
            self._sync()  # the staged copies are in place
        return self._locs

    def _view(self, locs, q: int, offset: int, count: int, dtype) -> np.ndarray:
        """Elements [offset, offset+count) of local rank q's shared argument."""
        win, base = int(locs[q, 0]), int(locs[q, 1])
        return self.arena.peer_view(win, q, base + offset * dtype.itemsize, count, dtype)

    def _own(self, arr: np.ndarray, locs) -> np.ndarray:
        """This rank's argument as it sits in shared memory (itself, or its staged copy)."""
        if self.lsize == 1 or self.arena.locate(arr)[0] != _NOT_SHARED:
            return arr  # alone on the host, nobody reads it: work in place
        return self._view(locs, self.lrank, 0, arr.shape[0], arr.dtype)

    def _mark(self, what: str, phase: str) -> None:
        """A phase on the runtime's timeline (Horovod-style activity names), when one is on."""
        timeline = self.ctx.timeline
        if timeline is not None:
            getattr(timeline, what)("allreduce", phase)

    def _chunk(self, dtype) -> int:
        return kernels.chunk_elems(self.chunk_bytes, dtype.itemsize)

    # ---- collectives ---------------------------------------------------------------------------
    def allreduce(self, buf, op: ReduceOp, out=None, scale: float = 1.0) -> None:
        buf = _flat(buf)
        ufunc = kernels.combiner(op)
        n = buf.shape[0]
        result = None if out is None else _flat(out)
        if self.size == 1 or n == 0:
            if result is not None:
                _scaled_copy(buf, result, scale)
            return
        trees = self._allreduce_trees()
        locs = self._share(buf, [True] * self.lsize)
        mine = self._own(buf, locs)
        shards = trees.shards(n)
        chunk = self._chunk(buf.dtype)
        me = self.lrank
        reduce_levels = self._levels[0]
        self._mark("start", "SHM_REDUCE")
        # Phase 1: reduce up the trees, deepest level first, a barrier between levels.
        for i, level in enumerate(reduce_levels):
            for tree, node, kids in level:
                if node == me:
                    off, cnt = shards[tree]
                    out = mine[off:off + cnt]
                    inputs = [out] + [self._view(locs, k, off, cnt, buf.dtype) for k in kids]
                    kernels.reduce_into(out, inputs, ufunc, chunk)
            if i < len(reduce_levels) - 1:
                self._sync()
        self._cross_and_broadcast(buf, mine, locs, shards, ufunc, result, scale)

    def allreduce_pieces(self, pieces: Sequence[np.ndarray], op: ReduceOp, out, scale: float = 1.0) -> None:
        """All-reduce the concatenation of ``pieces`` into ``out`` (see Backend.allreduce_pieces).

        Where the host's ranks can read and write each other's memory (:mod:`.cma`) and the
        trees are one-hop stars (the cpu-host plan), nothing is packed or staged in shared
        memory. Each shard's owner walks it in cache-sized chunks: it combines its own pieces,
        read in place, with each peer's slice, pulled into a scratch chunk (owner first, then
        the others by local rank: the shared-memory path's order), scales the chunk, and while
        the chunk is still in cache writes it into its own ``out`` and pushes it into every
        peer's ``out``. Each input byte is read once and each result byte written once, the
        least memory traffic an out-of-place all-reduce allows; two barriers (entry: everyone's
        addresses are published; exit: every push has landed) are the only synchronisation. A
        rank done with its shard helps its neighbour finish (:mod:`.single_copy`).
        Across hosts the owners all-reduce their shards between reducing and pushing (Blink's
        three-phase protocol). Otherwise the pieces are packed into the shared buffer and reduced
        there.
        """
        result = _flat(out)
        n = result.shape[0]
        if self.size == 1 or n == 0 or not self._single_copy(pieces, result.nbytes):
            self.stats["packed"] += 1
            self._mark("start", "COPY_IN")
            buf = self.buffer(n, result.dtype)
            np.concatenate(pieces, out=buf)  # (flat and contiguous: Backend.allreduce_pieces' contract)
            self._mark("end", "COPY_IN")
            self.allreduce(buf, op, out=result, scale=scale)
            return
        self.stats["single_copy"] += 1
        ufunc = kernels.combiner(op)
        trees = self._allreduce_trees()
        pieces = [_flat(p) for p in pieces]
        shards = trees.shards(n)
        me = self.lrank
        one_host = self.nhosts == 1
        mine = [(shards[tree], kids) for tree, node, kids in self._levels[0][0] if node == me]
        chunk = min(self._chunk(result.dtype), cma.MAX_CALL_BYTES // result.dtype.itemsize)
        words = self._control_words()
        single_copy.progress_start(words[me], sum(-(-cnt // chunk) for (_, cnt), _ in mine))
        tables, outs = self._publish(pieces, result)
        mark = self._mark
        mark("start", "SHM_REDUCE")
        # From the entry barrier on, peers write into our result: every rank must reach the exit
        # collective. A failure here (a transfer, even scratch that cannot be had) is this rank's
        # only: the protocol goes on (the peers wait in its collectives) and the exit collective
        # tells every rank, which all raise.
        failure: Optional[BaseException] = None
        try:
            item = result.dtype.itemsize
            scratch = tuple(s.get(min(chunk, n) * item + single_copy.LINE, np.uint8) for s in self._tmp)
            reducer = single_copy.ChunkReducer(self.peer_memory, self.local_pids, me, result, pieces, tables,
                                               outs if one_host else None, ufunc, scale if one_host else 1.0,
                                               chunk, scratch)
            if self._stars_by_owner is not None:
                self.stats["helped_chunks"] += single_copy.reduce_balanced(reducer, words, self._stars_by_owner,
                                                                           shards)
            else:
                for (off, cnt), kids in mine:
                    for lo, hi in reducer.chunks(off, cnt):
                        reducer.run(me, kids, lo, hi)
        except Exception as e:  # noqa: BLE001 - reported to every rank below
            failure = e
        mark("end", "SHM_REDUCE")
        if not one_host:
            mark("start", "CROSS_ALLREDUCE")
            for (off, cnt), kids in mine:
                shard = result[off:off + cnt]
                self._cross.run(shard, off / n, ufunc, self.scratch)  # even after a failure: hosts wait for it
                if failure is None:
                    try:
                        _scaled_copy(shard, shard, scale)
                        self._push(shard, off, kids, outs)
                    except Exception as e:  # noqa: BLE001 - reported to every rank below
                        failure = e
            mark("end", "CROSS_ALLREDUCE")
        # Our shards went out with the reduction; the others' arrive meanwhile: on the timeline
        # the broadcast phase is the wait for the last of them.
        mark("start", "SHM_BROADCAST")
        self._exit(failure)  # every push has landed, and nobody reads our pieces any more
        mark("end", "SHM_BROADCAST")

    def _exit(self, failure: Optional[BaseException]) -> None:
        """The single-copy path's exit barrier, which also tells every rank (of every host: a
        failed host's shards would be wrong elsewhere too) whether some rank failed; then all raise."""
        from mpi4py import MPI

        comm = self.local if self.nhosts == 1 else self.comm
        self._flag[0] = failure is not None
        comm.Allreduce(MPI.IN_PLACE, self._flag, op=MPI.MAX)
        self._syncs += 1
        if self._flag[0]:
            why = comm.allgather(None if failure is None else f"{type(failure).__name__}: {failure}")
            ranks = range(self.size) if comm is self.comm else self.local_ranks
            text = "; ".join(f"rank {ranks[r]}: {w}" for r, w in enumerate(why) if w)
            raise BackendError(f"the single-copy all-reduce failed ({text}); set BLINKFLOW_CPU_SINGLE_COPY=0 to "
                               "copy through shared memory instead")

    def _single_copy(self, pieces: Sequence[np.ndarray], nbytes: int) -> bool:
        """Whether this call reads peers' tensors in place: the same answer on every rank (the
        probe's answer is the host's, trees and sizes agree, every rank has the same pieces)."""
        if (self.peer_memory is None or nbytes < MIN_SINGLE_COPY_SHARD_BYTES * self.lsize
                or nbytes < MIN_SINGLE_COPY_PIECE_BYTES * max(1, len(pieces))):
            return False
        self._allreduce_trees()
        reduce_levels, broadcast_levels = self._levels
        return len(reduce_levels) == 1 and len(broadcast_levels) == 1

    def _publish(self, pieces: Sequence[np.ndarray], out: np.ndarray) -> Tuple[List[cma.PieceTable], List[int]]:
        """Write where this rank's pieces and ``out`` are into its control segment, synchronise
        (the entry barrier) and read every local rank's: (piece tables, ``out`` addresses). A
        table that would not fit is replaced by a private packed copy (a local choice: peers
        just read one run). A segment is read and written as 64-bit words through memoryviews:
        no numpy call per peer on this per-call path."""
        words = self._control_words()
        mine = words[self.lrank]
        addresses, sizes = cma.PieceTable.rows_of(pieces)
        if 2 + 2 * len(addresses) + single_copy.PROGRESS_WORDS > len(mine):
            packed = self.aside.get(sum(p.size for p in pieces), pieces[0].dtype)
            np.concatenate(pieces, out=packed)
            addresses, sizes = cma.PieceTable.rows_of([packed])
        count = len(addresses)
        mine[0] = count
        mine[1] = out.__array_interface__["data"][0]
        mine[2:2 + count] = array.array("Q", addresses)
        mine[2 + count:2 + 2 * count] = array.array("Q", sizes)
        self._sync()
        tables, outs = [], []
        for theirs in words:
            count = theirs[0]
            outs.append(theirs[1])
            tables.append(cma.PieceTable(theirs[2:2 + count].tolist(), theirs[2 + count:2 + 2 * count].tolist()))
        return tables, outs

    def _control_words(self) -> List[memoryview]:
        """Every local rank's control segment as 64-bit words (made once)."""
        if self._words is None:
            control = self.arena.control(_CONTROL_BYTES)
            self._words = [memoryview(segment).cast("Q") for segment in control.segments]
        return self._words

    def _push(self, values: np.ndarray, offset: int, kids: Sequence[int], outs: Sequence[int]) -> None:
        """Write ``values`` at element ``offset`` of every kid's result."""
        at = offset * values.dtype.itemsize
        local = values.__array_interface__["data"][0]
        for q in kids:
            for start in range(0, values.nbytes, cma.MAX_CALL_BYTES):
                nbytes = min(cma.MAX_CALL_BYTES, values.nbytes - start)
                self.peer_memory.write_span(self.local_pids[q], local + start, nbytes, outs[q] + at + start)

    def _cross_and_broadcast(self, buf: np.ndarray, mine: np.ndarray, locs, shards, ufunc,
                             result: Optional[np.ndarray], scale: float) -> None:
        """Phases 2 and 3 of an all-reduce whose phase 1 left every tree root's shard reduced over
        the host in ``mine`` (its shared segment, at ``locs``)."""
        trees, me, mark = self._trees, self.lrank, self._mark
        # After the last reduce level only the owners read their shards (phase 2), so the
        # level's barrier can go when there is a phase 2.
        if self.nhosts == 1:
            self._sync()
        mark("end", "SHM_REDUCE")
        # Phase 2: each shard's owner all-reduces it with its counterparts on the other hosts.
        # Only the owner touches its shard here, so no barrier is needed before this phase.
        n = mine.shape[0]
        if self.nhosts > 1:
            mark("start", "CROSS_ALLREDUCE")
            for tree, (off, cnt) in enumerate(shards):
                if trees.trees[tree].root == me:
                    self._cross.run(mine[off:off + cnt], off / n, ufunc, self.scratch)
            self._sync()
            mark("end", "CROSS_ALLREDUCE")
        mark("start", "SHM_BROADCAST")
        # Phase 3: broadcast down the same trees, a barrier between levels. No exit barrier:
        # peers may still read our segment, but nothing writes it before the next call's entry
        # barrier (user slots alternate, see shm.py). With ``result``, a shard goes from the
        # parent's segment straight into it (scaled on the way): one pass over the data fewer
        # than gathering into the segment and copying out; only shards this rank forwards stay
        # in the segment.
        forwards = self._forwards
        broadcast_levels = self._levels[1]
        for i, level in enumerate(broadcast_levels):
            for tree, child, parent in level:
                if child == me:
                    off, cnt = shards[tree]
                    src = self._view(locs, parent, off, cnt, mine.dtype)
                    if result is None or tree in forwards:
                        np.copyto(mine[off:off + cnt], src)
                        src = mine[off:off + cnt]
                    if result is not None:
                        _scaled_copy(src, result[off:off + cnt], scale)
            if i < len(broadcast_levels) - 1:
                self._sync()
        if result is not None:
            for tree, (off, cnt) in enumerate(shards):
                if trees.trees[tree].root == me:
                    _scaled_copy(mine[off:off + cnt], result[off:off + cnt], scale)
        elif mine is not buf:
            np.copyto(buf, mine)
        mark("end", "SHM_BROADCAST")

    def broadcast(self, buf, root: int) -> None:
        buf = _flat(buf)
        if self.size == 1 or buf.shape[0] == 0:
            return
        if not 0 <= root < self.size:
            raise BackendError(f"broadcast root {root} is not a rank of this job (size {self.size})")
        root_local, _, root_cross = self.places[root]
        if self.nhosts > 1 and not self.even:
            self.comm.Bcast(_bytes(buf), root=root)
            return
        # Phase 1 (several hosts): the ranks with the root's local rank carry it between hosts.
        if self.nhosts > 1 and self.lrank == root_local:
            self.cross.Bcast(_bytes(buf), root=root_cross)
        if self.lsize == 1:
            return
        # Phase 2: every local rank copies from the segment of the host's carrier.
        needed = [q == root_local for q in range(self.lsize)]
        locs = self._share(buf, needed)
        if self.lrank != root_local:
            np.copyto(buf, self._view(locs, root_local, 0, buf.shape[0], buf.dtype))

    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        send, recv = _flat(send), _flat(recv)
        counts = [int(c) for c in counts]
        self._check_counts(counts, send.shape[0], recv.shape[0], "allgather")
        offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        if self.size == 1:
            np.copyto(recv[:counts[0]], send)
            return
        if self.nhosts > 1:
            sizes = [c * send.dtype.itemsize for c in counts]
            displs = [int(o) * send.dtype.itemsize for o in offs[:-1]]
            self.comm.Allgatherv(_bytes(send), [recv.view(np.uint8), (sizes, displs), _mpi_byte()])
            return
        locs = self._share(send, [True] * self.lsize)
        for q in range(self.lsize):
            g = self.local_ranks[q]
            if counts[g]:
                np.copyto(recv[offs[g]:offs[g + 1]], self._view(locs, q, 0, counts[g], send.dtype))

    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp) -> None:
        send, recv = _flat(send), _flat(recv)
        ufunc = kernels.combiner(op)
        counts = [int(c) for c in counts]
        total = sum(counts)
        if len(counts) != self.size or send.shape[0] != total or recv.shape[0] < counts[self.rank]:
            raise BackendError(f"reducescatter: send has {send.shape[0]} elements, recv {recv.shape[0]}, "
                               f"counts {counts} for {self.size} ranks")
        lo = sum(counts[:self.rank])
        mine = recv[:counts[self.rank]]
        if self.size == 1:
            np.copyto(mine, send)
            return
        if self.nhosts > 1:
            # Across hosts: the three-phase all-reduce of a private copy, then keep our slice.
            tmp = self.aside.get(total, send.dtype)
            np.copyto(tmp, send)
            self.allreduce(tmp, op)
            np.copyto(mine, tmp[lo:lo + counts[self.rank]])
            return
        n = counts[self.rank]
        # Rank q reads slice q of every peer's send, in place where it sits in a shared window.
        # A recv that overlaps our send anywhere but on our own slice (MPI's in-place convention
        # puts the result at the start: slice 0, which rank 0 may still be reading) would write
        # over what a peer reads, so the peers then read a staged copy.
        at = send.__array_interface__["data"][0] + lo * send.dtype.itemsize
        aliased = np.may_share_memory(mine, send)
        locs = self._share(send, [True] * self.lsize, stage=aliased and mine.__array_interface__["data"][0] != at)
        inputs = [self._view(locs, q, lo, n, send.dtype) for q in range(self.lsize)]
        if aliased:  # the sum is built aside: our own input may be ``mine`` itself
            tmp = self.aside.get(n, send.dtype)
            kernels.reduce_into(tmp, inputs, ufunc, self._chunk(send.dtype))
            np.copyto(mine, tmp)
        else:
            kernels.reduce_into(mine, inputs, ufunc, self._chunk(send.dtype))

    def alltoall(self, send, send_counts: Sequence[int], recv, recv_counts: Sequence[int]) -> None:
        send, recv = _flat(send), _flat(recv)
        item = send.dtype.itemsize
        sc = [int(c) * item for c in send_counts]
        rc = [int(c) * item for c in recv_counts]
        if len(sc) != self.size or len(rc) != self.size or sum(sc) > send.nbytes or sum(rc) > recv.nbytes:
            raise BackendError(f"alltoall: counts {list(send_counts)} / {list(recv_counts)} do not fit buffers of "
                               f"{send.shape[0]} / {recv.shape[0]} elements on {self.size} ranks")
        sd = [0] + list(np.cumsum(sc)[:-1])
        rd = [0] + list(np.cumsum(rc)[:-1])
        self.comm.Alltoallv([send.view(np.uint8), (sc, [int(x) for x in sd]), _mpi_byte()],
                            [recv.view(np.uint8), (rc, [int(x) for x in rd]), _mpi_byte()])

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for words in self._words or ():
                words.release()  # views of the control window, which closing the arena frees
            self._words = None
            self.arena.close()
            if self.peer_memory is not None:
                cma.disallow_peers()

    # ---- helpers -----------------------------------------------------------------------------
    def _check_counts(self, counts, nsend, nrecv, what) -> None:
        if len(counts) != self.size or counts[self.rank] != nsend or nrecv < sum(counts):
            raise BackendError(f"{what}: counts {counts} do not match {self.size} ranks, this rank's "
                               f"{nsend} elements or the {nrecv}-element output")


def _mpi_byte():
    from mpi4py import MPI

    return MPI.BYTE
