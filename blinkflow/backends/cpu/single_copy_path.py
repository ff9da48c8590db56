"""The single-copy all-reduce: the lowered schedule's one-hop stars run by reading and writing the
peers' tensors in place (cross-memory attach, :mod:`.cma`) instead of chunk transfers.

Which rank combines which range, and in what order, is read off the schedule the runner would
otherwise run (:func:`blinkflow.schedule.views.one_hop_stars`): each star's root combines its
range (own value first, then its children in the order of its ``recv_reduce`` steps: the same
bits the runner computes), scales it and writes it into its own result and every child's. Across
hosts the roots first run the schedule's own cross-host steps (phase 2) through the runner, then
write. Nothing is packed or staged: each input byte is read once and each result byte written
once, the least memory traffic an out-of-place all-reduce allows; two collectives (entry: every
rank's addresses are published; exit: every write has landed, and did anyone fail) are the only
synchronisation. On one host a rank done with its star helps its neighbour (:mod:`.single_copy`).
"""
from __future__ import annotations

import array
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp
from ...schedule.program import RankProgram, compile_program
from ...schedule.runner import SequenceState, run_program
from ...schedule.views import Star, cross_host_part, one_hop_stars
from ..base import Layout
from . import cma, kernels, single_copy
from .transport import CpuTransport, Scratch, scaled_copy

#: Bytes of the control window per rank: where its tensors are, for peers reading them in place
#: (two 64-bit words a piece: a group of up to about 131,000 pieces is read where it lies, a larger
#: one from a packed copy). The shared arena's granule, so none of the segment is left unused.
CONTROL_BYTES = 2 << 20


class _Shape:
    """What a call shape needs, worked out once from its schedule: this host's stars (in local
    ranks), the ones this rank roots, who helps whom, and the cross-host program."""

    def __init__(self, program: RankProgram, layout: Layout, rank_of: Dict[int, int]):
        self.program = program
        schedule = program.schedule
        local_of = {d: layout.local_rank_of[rank_of[d]] for d in layout.local_devices}
        stars = one_hop_stars(schedule, layout.local_devices)
        everywhere = all(one_hop_stars(schedule, [layout.devices[r] for r in ranks]) is not None
                         for ranks in layout.host_ranks)
        self.usable = stars is not None and everywhere and bool(stars)
        self.stars: List[Tuple[Star, Tuple[int, ...]]] = []
        self.mine: List[Tuple[Star, Tuple[int, ...]]] = []
        self.by_owner = None
        self.cross: Optional[RankProgram] = None
        if not self.usable:
            return
        me = layout.local_rank
        for star in stars:
            kids = tuple(local_of[k] for k in star.kids)
            self.stars.append((star, kids))
            if local_of[star.root] == me:
                self.mine.append((star, kids))
        owners = {local_of[s.root]: (i, kids) for i, (s, kids) in enumerate(self.stars)}
        if layout.nhosts == 1 and len(owners) == len(self.stars) == layout.local_size:
            self.by_owner = owners  # one star per rank: ranks can help each other finish
        if layout.nhosts > 1:
            host_of = dict(zip(layout.devices, layout.hosts))
            self.cross = compile_program(cross_host_part(schedule, host_of.__getitem__),
                                         layout.devices[layout.rank], rank_of)

    @property
    def shards(self) -> List[Tuple[int, int]]:
        return [(s.offset, s.count) for s, _ in self.stars]


class SingleCopyAllreduce:
    """The path, for one backend. ``peer_memory`` / ``pids`` come from :func:`.cma.probe`."""

    def __init__(self, layout: Layout, local_comm, comm, arena, peer_memory: cma.PeerMemory, pids: Sequence[int],
                 transport: CpuTransport, state: SequenceState, mark: Callable[[str, str], None],
                 stats: Optional[dict] = None):
        self.layout = layout
        self.local = local_comm
        self.comm = comm
        self.arena = arena
        self.memory = peer_memory
        self.pids = list(pids)
        self.transport = transport
        self.state = state
        self.mark = mark
        self.rank_of = {d: r for r, d in enumerate(layout.devices)}
        self._shapes: Dict[int, _Shape] = {}  # id(program) -> shape; programs are cached by the backend
        self._words: Optional[List[memoryview]] = None
        self._flag = np.zeros(1, np.int8)
        self._tmp = (Scratch(), Scratch())
        self.helped_chunks = 0
        self.stats = stats if stats is not None else {"single_copy": 0, "helped_chunks": 0}
        """The backend's counters: calls run here, and chunks done for a slower neighbour."""

    def shape(self, program: RankProgram) -> _Shape:
        shape = self._shapes.get(id(program))
        if shape is None or shape.program is not program:
            shape = _Shape(program, self.layout, self.rank_of)
            self._shapes[id(program)] = shape
            if len(self._shapes) > 64:
                self._shapes.pop(next(iter(self._shapes)))
        return shape

    def allreduce_pieces(self, program: RankProgram, choice, pieces: Sequence[np.ndarray], op: ReduceOp,
                         out: np.ndarray, scale: float = 1.0, prescale: float = 1.0) -> None:
        """The backend's ``single_copy`` algorithm for a call shape the policy gave it
        (``choice``; ``program`` at the runner's chunk): ``Backend.allreduce_pieces``' arguments,
        never prescaled (the pieces are read where they lie, so they are not scaled)."""
        if prescale != 1.0:
            raise BackendError("the single copy reads the pieces where they lie: a prescaled call is packed")
        for piece in pieces:
            if not isinstance(piece, np.ndarray) or not piece.flags.c_contiguous:
                raise BackendError("the single copy reads C-contiguous numpy arrays where they lie")
        self.stats["single_copy"] += 1
        before = self.helped_chunks
        self.mark("start", choice.phase)
        try:
            self.run(program, [p.reshape(-1) for p in pieces], kernels.combiner(op), out, scale, choice.chunk_bytes)
        finally:
            self.mark("end", choice.phase)
        self.stats["helped_chunks"] += self.helped_chunks - before

    def run(self, program: RankProgram, pieces: Sequence[np.ndarray], ufunc, result: np.ndarray, scale: float,
            chunk_bytes: int) -> None:
        """All-reduce ``pieces`` into ``result`` times ``scale`` by the stars of ``program``'s
        schedule, a chunk of ``chunk_bytes`` (the policy's) at a time."""
        shape = self.shape(program)
        layout, me, mark = self.layout, self.layout.local_rank, self.mark
        one_host = layout.nhosts == 1
        chunk = max(1, min(chunk_bytes, cma.MAX_CALL_BYTES) // result.dtype.itemsize)
        words = self._control_words()
        if shape.by_owner is not None:
            star, _ = shape.stars[shape.by_owner[me][0]]
            single_copy.progress_start(words[me], -(-star.count // chunk))
        tables, outs = self._publish(pieces, result)
        mark("start", "SHM_REDUCE")
        # From the entry barrier on, peers write into our result: every rank must reach the exit
        # collective. A failure here (a transfer, even scratch that cannot be had) is this rank's
        # only: the protocol goes on (the peers wait in its collectives) and the exit collective
        # tells every rank, which all raise.
        failure: Optional[BaseException] = None
        try:
            item = result.dtype.itemsize
            n = result.shape[0]
            scratch = tuple(s.get(min(chunk, n) * item + single_copy.LINE, np.uint8) for s in self._tmp)
            reducer = single_copy.ChunkReducer(self.memory, self.pids, me, result, pieces, tables,
                                               outs if one_host else None, ufunc, scale if one_host else 1.0,
                                               chunk, scratch)
            if shape.by_owner is not None:
                self.helped_chunks += single_copy.reduce_balanced(reducer, words, shape.by_owner, shape.shards)
            else:
                for star, kids in shape.mine:
                    for lo, hi in reducer.chunks(star.offset, star.count):
                        reducer.run(me, kids, lo, hi)
        except Exception as e:  # noqa: BLE001 - reported to every rank below
            failure = e
        mark("end", "SHM_REDUCE")
        if not one_host:
            mark("start", "CROSS_ALLREDUCE")
            # Even after a local failure: the other hosts wait for our part of phase 2.
            self.transport.prepare(result, ufunc, None, 1.0, chunk)
            run_program(shape.cross, self.transport, self.state)
            if failure is None:
                try:
                    for star, kids in shape.mine:
                        values = result[star.offset:star.offset + star.count]
                        scaled_copy(values, values, scale)
                        self._push(values, star.offset, kids, outs)
                except Exception as e:  # noqa: BLE001 - reported to every rank below
                    failure = e
            mark("end", "CROSS_ALLREDUCE")
        # Our ranges went out with the reduction; the others' arrive meanwhile: on the timeline
        # the broadcast phase is the wait for the last of them.
        mark("start", "SHM_BROADCAST")
        self._exit(failure)  # every write has landed, and nobody reads our pieces any more
        mark("end", "SHM_BROADCAST")

    def _exit(self, failure: Optional[BaseException]) -> None:
        """The exit collective, which also tells every rank (of every host: a failed host's
        ranges would be wrong elsewhere too) whether some rank failed; then all raise."""
        from mpi4py import MPI

        comm = self.local if self.layout.nhosts == 1 else self.comm
        self._flag[0] = failure is not None
        comm.Allreduce(MPI.IN_PLACE, self._flag, op=MPI.MAX)
        if self._flag[0]:
            why = comm.allgather(None if failure is None else f"{type(failure).__name__}: {failure}")
            ranks = range(self.layout.size) if comm is self.comm else self.layout.local_ranks
            text = "; ".join(f"rank {ranks[r]}: {w}" for r, w in enumerate(why) if w)
            raise BackendError(f"the single-copy all-reduce failed ({text}); set BLINKFLOW_CPU_SINGLE_COPY=0 to "
                               "copy through shared memory instead")

    def _publish(self, pieces: Sequence[np.ndarray], out: np.ndarray) -> Tuple[List[cma.PieceTable], List[int]]:
        """Write where this rank's pieces and ``out`` are into its control segment, synchronise
        (the entry barrier) and read every local rank's: (piece tables, ``out`` addresses). A
        table that would not fit is replaced by a private packed copy (a local choice: peers
        just read one run). A segment is read and written as 64-bit words through memoryviews:
        no numpy call per peer on this per-call path."""
        words = self._control_words()
        mine = words[self.layout.local_rank]
        addresses, sizes = cma.PieceTable.rows_of(pieces)
        if 2 + 2 * len(addresses) + single_copy.PROGRESS_WORDS > len(mine):
            packed = np.concatenate(pieces)
            self._packed = packed  # alive until the next call: peers read it until the exit
            addresses, sizes = cma.PieceTable.rows_of([packed])
        count = len(addresses)
        mine[0] = count
        mine[1] = out.__array_interface__["data"][0]
        mine[2:2 + count] = array.array("Q", addresses)
        mine[2 + count:2 + 2 * count] = array.array("Q", sizes)
        self.local.Barrier()
        tables, outs = [], []
        for theirs in words:
            count = theirs[0]
            outs.append(theirs[1])
            tables.append(cma.PieceTable(theirs[2:2 + count].tolist(), theirs[2 + count:2 + 2 * count].tolist()))
        return tables, outs

    def _control_words(self) -> List[memoryview]:
        """Every local rank's control segment as 64-bit words, :data:`CONTROL_BYTES` of it (made
        once, collectively)."""
        if self._words is None:
            control = self.arena.control(CONTROL_BYTES)
            self._words = [memoryview(segment).cast("Q")[:CONTROL_BYTES // 8] for segment in control.segments]
        return self._words

    def _push(self, values: np.ndarray, offset: int, kids: Sequence[int], outs: Sequence[int]) -> None:
        """Write ``values`` at element ``offset`` of every kid's result."""
        at = offset * values.dtype.itemsize
        local = values.__array_interface__["data"][0]
        for q in kids:
            for start in range(0, values.nbytes, cma.MAX_CALL_BYTES):
                nbytes = min(cma.MAX_CALL_BYTES, values.nbytes - start)
                self.memory.write_span(self.pids[q], local + start, nbytes, outs[q] + at + start)

    def close(self) -> None:
        for words in self._words or ():
            words.release()  # views of the control window, which closing the arena frees
        self._words = None
