"""The CPU executor: numpy over shared memory inside a host, MPI point-to-point across hosts.

Every collective runs the schedule lowered from the job's plan (:mod:`blinkflow.schedule`:
Blink's trees, chunk-pipelined, and across hosts the three-phase all-reduce of §5) through the
one runner (:func:`~blinkflow.schedule.runner.run_program`) over a :class:`.CpuTransport`:
inside a host a receiver reads the sender's chunk in place from a shared window, between hosts
the chunk travels as an MPI message. The CUDA backend runs the same runner over its own
transport, and the simulator simulates the same schedule.

Two named paths besides: a small all-reduce (the policy's ``mpi``: a few hundred KiB at most)
is MPI's own all-reduce (:mod:`.mpi_allreduce`), whose one C call costs less than the runner's
per-chunk messages; and where the host's ranks can read and write each other's memory (Linux
cross-memory attach) and the schedule's trees inside a host are one-hop stars, a large all-reduce
reads every rank's tensors where they lie instead of packing them into shared memory first
(:mod:`.single_copy_path`); it combines each range in the schedule's order, so its bits are the
runner's. Every call is collective over ``comm`` and made in the same order on every rank (the
runtime's contract).

Two observers ship with the backend although only tests and debugging read them: ``trace`` (None
unless a test sets a list, then every transfer the runner makes) and ``stats`` (all-reduces per
path). A multi-process test sees through them which path a call took, inside the real backend its
ranks run; they cost one ``is None`` test per transfer and one integer add per call.
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import itertools
import platform
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp
from ...schedule import policy
from ...schedule.cache import Programs
from ...schedule.program import RankProgram
from ...schedule.runner import SequenceState, run_program, settle
from .. import teardown
from ..base import Backend, BackendContext
from ..policy_agreement import agree_policy
from ..wire import MpiWire
from . import cma, kernels, single_copy
from .mailbox import Mailbox, shared_memory_ordered
from .mpi_allreduce import MpiAllreduce
from .shm import SharedArena
from .single_copy_path import SingleCopyAllreduce
from .transport import CpuTransport, scaled_copy

#: Most received chunks one reduction folds in: a star's root combines all its children in one
#: pass over memory (cache-blocked by ``kernels.reduce_into``) instead of one pass per child.
FUSE_INPUTS = 64


#: Most bytes of a packed all-reduce staged in the shared window at once. A larger call runs in
#: stages of this size, so the window (two slots) and the peers' windows a rank reads stay a few
#: stages big instead of one more copy of the whole tensor each: a 600 MiB out-of-place call peaks
#: at its input and result plus a few stages, not twice the tensor more. A stage holds whole
#: pipeline chunks, and one stage is long enough that its start costs little against its copy.
def _pack_range(pieces: Sequence[np.ndarray], starts: Sequence[int], lo: int, out: np.ndarray) -> None:
    """Copy elements ``[lo, lo + out.size)`` of the concatenation of ``pieces`` into ``out``;
    ``starts[i]`` is where piece ``i`` begins in it (so a stage finds its first piece at once).
    One ``np.concatenate`` of the stage's pieces, the first and last cut to the stage: a
    training step's hundreds of gradients are copied by one C loop, not a Python one."""
    hi = lo + out.shape[0]
    first, last = bisect.bisect_right(starts, lo) - 1, bisect.bisect_left(starts, hi) - 1
    parts = list(pieces[first:last + 1])
    parts[-1] = parts[-1][:hi - starts[last]]  # (first and last may be one piece: cut its end first)
    parts[0] = parts[0][lo - starts[first]:]
    np.concatenate(parts, out=out)


class _AllreduceShape(NamedTuple):
    """How an all-reduce of one call shape runs, decided on its first call: the policy's choice
    and the programs of its stages (a training loop repeats a few shapes every step, where
    deciding again would cost more Python than the rest of a small call's bookkeeping)."""

    choice: policy.Choice
    program: RankProgram
    """The whole call's program (single copy), or a full stage's (packed)."""
    stage: int
    """Elements per stage (``n`` when one stage holds the call)."""
    last: RankProgram
    """The last stage's program (``program`` unless the last stage is shorter)."""
    run: Callable[..., None]
    """The algorithm that runs it, with ``allreduce_pieces``' arguments (its result flat)."""


def _flat(arr) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise BackendError(f"the cpu backend works on numpy arrays, got {type(arr).__name__}")
    if not arr.flags.c_contiguous:
        raise BackendError("the cpu backend needs C-contiguous buffers")
    return arr.reshape(-1)


class CpuBackend(Backend):
    """Collectives on numpy buffers for ranks that share a host's memory (and MPI across hosts)."""

    name = "cpu"

    def __init__(self, ctx: BackendContext):
        self.ctx = ctx
        self.layout = layout = ctx.layout
        self.comm = ctx.comm
        self.local = ctx.local_comm
        self.rank, self.size = layout.rank, layout.size
        config = ctx.config
        self.config = config
        self.chunk_bytes = config.chunk_bytes if config is not None else 0
        """``BLINKFLOW_CHUNK_BYTES`` (0: the policy's chunks); tests set it to force many chunks."""
        self.arena = SharedArena(self.local)
        self._wire_comm = self.comm.Dup()  # the transport's messages never meet another layer's
        self.mailbox = self._open_mailbox(config)
        self.wire = MpiWire(self._wire_comm, self.mailbox, failure=ctx.failure)
        self.transport = CpuTransport(self.wire, layout, self.arena)
        self.state = SequenceState()
        self.programs = Programs(ctx.plan_for, layout.devices, layout.rank, fuse_inputs=FUSE_INPUTS,
                                 check=bool(config is not None and config.check_schedules),
                                 window=policy.DEVICE_WINDOW, proven=config.check_cache if config is not None else None)
        self.trace: Optional[list] = None
        """Set to a list to record every transfer the runner makes (tests)."""
        self.stats = {"single_copy": 0, "packed": 0, "mpi": 0, "helped_chunks": 0}
        """All-reduces of pieces by path, and chunks done for a slower neighbour (tests, debugging)."""
        self.l2_bytes = single_copy.l2_bytes()
        self.single_copy: Optional[SingleCopyAllreduce] = self._probe_single_copy(config)
        self.mpi_allreduce = MpiAllreduce(self.comm, ctx.failure, self._mark, self.stats)
        self.caps = policy.Capabilities("cpu", single_copy=self.single_copy is not None, l2_bytes=self.l2_bytes)
        self.last_choice: Optional[policy.Choice] = None
        """The policy's choice for the latest collective (tests, debugging)."""
        self._allreduce_shapes: "collections.OrderedDict[tuple, _AllreduceShape]" = collections.OrderedDict()
        self._closed = False
        agree_policy(self.comm, config, self.caps, layout)

    def _open_mailbox(self, config) -> Optional[Mailbox]:
        """The shared-memory rings of the host's control messages (:mod:`.mailbox`), or None for
        MPI messages. The choice is the same on every rank (an agreed setting, and the CPU)."""
        choice = config.cpu_control if config is not None else "auto"
        ordered = shared_memory_ordered()
        if choice == "shm" and not ordered:
            raise BackendError(f"BLINKFLOW_CPU_CONTROL=shm needs a CPU with total store order (x86-64); this one "
                               f"is {platform.machine()!r}: set it to auto or mpi")
        if self.layout.local_size == 1 or choice == "mpi" or not ordered:
            return None
        return Mailbox(self.local, self.layout.local_ranks)

    def _probe_single_copy(self, config) -> Optional[SingleCopyAllreduce]:
        """The single-copy path, where every local rank can read the others' memory. Across
        hosts it ends in one collective over all ranks, so every host must choose it for the same
        calls: hosts of one size (its size threshold scales with the host's ranks) that can all
        read their ranks' memory. Otherwise a host that packs would leave the others waiting."""
        layout = self.layout
        memory, pids = None, []
        if layout.local_size > 1 and (config is None or config.cpu_single_copy):
            memory, pids = cma.probe(self.local)
        if layout.nhosts > 1:
            from mpi4py import MPI

            everywhere = self.comm.allreduce(int(memory is not None), op=MPI.MIN)
            if memory is not None and not (everywhere and layout.even):
                memory = None
                cma.disallow_peers()
        if memory is None:
            return None
        return SingleCopyAllreduce(layout, self.local, self.comm, self.arena, memory, pids, self.transport,
                                   self.state, self._mark, self.stats)

    # ---- plumbing ----------------------------------------------------------------------------
    def buffer(self, nelems: int, dtype):
        """A slot of this rank's shared window (peers read it in place). Collective over the
        host's ranks when the window grows, so every local rank asks for the same sizes (the
        runtime's fused batches agree). Nobody reads it any more: a collective on a slot returns
        without waiting for its receivers' releases (a wait on the critical path of every call,
        for peers that are still copying), and they are waited for here, before the slot is
        handed out again, by when they have arrived. So a caller that writes a slot again must
        first get it again from here (``Backend.buffer``'s contract)."""
        dtype = np.dtype(dtype)
        nbytes = int(nelems) * dtype.itemsize
        settle(self.state, self.transport, self.arena.next_user_slot(nbytes))  # None: a new window
        return self.arena.user_slot(nbytes, dtype)

    def _shared(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` if it sits in a shared window, else a copy in :meth:`buffer` (every rank passes
        either kind alike: the runtime always packs into :meth:`buffer`)."""
        if self.layout.local_size == 1 or self.arena.locate(arr)[0] >= 0:
            return arr
        work = self.buffer(arr.shape[0], arr.dtype)
        np.copyto(work, arr)
        return work

    def _choose(self, collective: str, nbytes: int, itemsize: int, npieces: int = 1,
                dtype: Optional[np.dtype] = None, stars: Optional[Callable[[], bool]] = None) -> policy.Choice:
        """The policy's algorithm and chunk for this call (the same on every rank: its inputs
        were agreed at construction, and every rank makes the same call). ``stars()`` says
        whether the call's trees let the single copy run it (the policy asks it only where it
        would choose the single copy); without it the single copy is not possible."""
        choice = policy.choose(collective, nbytes, itemsize, self.layout, self._config(), self.caps, npieces=npieces,
                               dtype=None if dtype is None else dtype.name,
                               trees_allow_single_copy=stars or (lambda: False))
        self.last_choice = choice
        return choice

    def _config(self):
        """The job's settings with the chunk this backend runs (tests set ``chunk_bytes`` live)."""
        if self.config is None or self.config.chunk_bytes == self.chunk_bytes:
            return self.config
        return dataclasses.replace(self.config, chunk_bytes=self.chunk_bytes)

    def _program(self, collective: str, n: int, itemsize: int, root=None, counts=None, dtype=None):
        """The call's choice and, where the runner runs it, its program (else None)."""
        choice = self._choose(collective, n * itemsize, itemsize, dtype=dtype)
        if choice.algorithm != "runner":
            return choice, None
        return choice, self.programs.get(collective, n, choice.chunk_elems(itemsize), root=root, counts=counts)

    def _run(self, choice: policy.Choice, program, buf: np.ndarray, ufunc=None, out: Optional[np.ndarray] = None,
             scale: float = 1.0) -> None:
        self._mark("start", choice.phase)
        try:
            self._run_runner(choice, program, buf, ufunc, out, scale)
        finally:
            self._mark("end", choice.phase)

    def _run_runner(self, choice: policy.Choice, program, buf: np.ndarray, ufunc, out, scale) -> None:
        self.transport.trace = self.trace
        where = self.transport.prepare(buf, ufunc, out, scale, max(1, choice.block_bytes // buf.itemsize))
        self._mark("start", "RUN_SCHEDULE")
        # On a slot of :meth:`buffer`, with peers on this host only, the releases are waited for
        # when the slot is next handed out. (An ``Isend`` to another host must complete before
        # the call returns: MPI reads the slot, and nobody could wait for it at teardown.)
        slot = self.arena.user_slot_of(buf, where) if self.transport.local_only(program) else None
        if slot is not None:
            # A caller running on the same slot again without asking buffer() (allowed while it
            # does not write it in between): settle the run before, so at most one run per slot
            # stays unsettled and the release bookkeeping cannot grow call after call.
            settle(self.state, self.transport, slot)
        run_program(program, self.transport, self.state, defer=slot)
        self._mark("end", "RUN_SCHEDULE")

    # ---- collectives ---------------------------------------------------------------------------
    def allreduce(self, buf, op: ReduceOp, out=None, scale: float = 1.0) -> None:
        buf = _flat(buf)
        ufunc = kernels.combiner(op)
        n = buf.shape[0]
        result = None if out is None else _flat(out)
        if self.size == 1 or n == 0:
            if result is not None:
                scaled_copy(buf, result, scale)
            return
        choice, program = self._program("allreduce", n, buf.itemsize, dtype=buf.dtype)
        if choice.algorithm == "mpi":
            if result is None:
                self.mpi_allreduce.run_in_place(buf, op)
            else:
                self.mpi_allreduce.run([buf], op, result, scale)
            return
        work = self._shared(buf)
        if result is None:
            self._run(choice, program, work, ufunc)
            if work is not buf:
                np.copyto(buf, work)
        else:
            self._run(choice, program, work, ufunc, out=result, scale=scale)

    def allreduce_pieces(self, pieces: Sequence[np.ndarray], op: ReduceOp, out, scale: float = 1.0,
                         prescale: float = 1.0) -> None:
        """All-reduce the concatenation of ``pieces`` into ``out`` (see Backend.allreduce_pieces)
        by the algorithm :meth:`allreduce_algorithm` answers."""
        result = _flat(out)
        self.allreduce_algorithm(result.shape[0], result.dtype, len(pieces), prescale == 1.0)(
            pieces, op, result, scale, prescale)

    def allreduce_algorithm(self, nelems: int, dtype, npieces: int, in_place: bool) -> Callable[..., None]:
        """The policy's algorithm for the call shape (see Backend.allreduce_algorithm), decided on
        its first call: MPI's all-reduce (:mod:`.mpi_allreduce`), the single copy where it suits
        the call (:mod:`.single_copy_path`; a prescaled call is packed: the single copy reduces the
        callers' tensors where they lie, and those must not be scaled in place), else the pieces
        packed into :meth:`buffer` and run by the runner, a stage at a time. Its result must be
        flat (the executor's is)."""
        if self.size == 1 or nelems == 0:
            return self._allreduce_alone
        shape = self._allreduce_shape(nelems, np.dtype(dtype), npieces, in_place)
        self.last_choice = shape.choice
        return shape.run

    def _allreduce_alone(self, pieces: Sequence[np.ndarray], op: ReduceOp, out: np.ndarray, scale: float = 1.0,
                         prescale: float = 1.0) -> None:
        """One rank, or nothing to reduce: the pieces, scaled, are the result."""
        if out.shape[0]:
            np.concatenate(pieces, out=out)
            if prescale != 1.0:
                self.scale(out, prescale)
            if scale != 1.0:
                scaled_copy(out, out, scale)

    def _allreduce_packed(self, choice: policy.Choice, program: RankProgram, stage: int, last: RankProgram,
                          pieces: Sequence[np.ndarray], op: ReduceOp, out: np.ndarray, scale: float = 1.0,
                          prescale: float = 1.0) -> None:
        """The runner's algorithm: the pieces packed into :meth:`buffer`, ``stage`` elements at a
        time (the policy's, ``Choice.stage_elems``), prescaled, and the stage's program run on it
        (``last`` for a shorter last stage)."""
        n = out.shape[0]
        self.stats["packed"] += 1
        ufunc = kernels.combiner(op)
        if stage == n:  # one stage: the whole call packed by one C loop
            self._mark("start", "COPY_IN")
            buf = self.buffer(n, out.dtype)
            np.concatenate(pieces, out=buf)  # (flat and contiguous: Backend.allreduce_pieces' contract)
            if prescale != 1.0:
                self.scale(buf, prescale)
            self._mark("end", "COPY_IN")
            self._run(choice, program, buf, ufunc, out=out, scale=scale)
            return
        starts = list(itertools.accumulate((p.shape[0] for p in pieces[:-1]), initial=0))
        for lo in range(0, n, stage):
            hi = min(n, lo + stage)
            self._mark("start", "COPY_IN")
            buf = self.buffer(hi - lo, out.dtype)
            _pack_range(pieces, starts, lo, buf)
            if prescale != 1.0:
                self.scale(buf, prescale)
            self._mark("end", "COPY_IN")
            self._run(choice, program if hi - lo == stage else last, buf, ufunc, out=out[lo:hi], scale=scale)

    def _allreduce_shape(self, n: int, dtype: np.dtype, npieces: int, in_place: bool) -> _AllreduceShape:
        """The policy's decision for an all-reduce of ``n`` elements of ``dtype`` in
        ``npieces`` tensors (``in_place``: the single copy may read them where they lie, i.e.
        no prescale), asked once and remembered per call shape. The single copy runs the
        runner's schedule, so the policy is handed whether the shape's trees let it run, read off
        the program at the runner's chunk (a rule of the policy's that depends on no call); MPI's
        own all-reduce needs no program.
        Every input of the decision is in the key: the call's shape, and what a test may change
        on a live backend (the chunk, the single copy, the policy's stage size, the algorithm)."""
        itemsize = dtype.itemsize
        key = (n, dtype, npieces, in_place, self.chunk_bytes, self.single_copy is not None, policy.CPU_STAGE_BYTES,
               policy.CPU_CROSS_HOST_STAGE_BYTES, self.config.algorithm if self.config is not None else None)
        shape = self._allreduce_shapes.get(key)
        if shape is not None:
            self._allreduce_shapes.move_to_end(key)
            return shape
        runner_chunk = policy.chunk_elems(policy.cpu_runner_chunk_bytes(self._config()), itemsize)

        def stars() -> bool:
            return in_place and self.single_copy is not None and \
                self.single_copy.shape(self.programs.get("allreduce", n, runner_chunk)).usable

        choice = self._choose("allreduce", n * itemsize, itemsize, npieces=npieces, dtype=dtype, stars=stars)
        program = None if choice.algorithm == "mpi" else self.programs.get("allreduce", n, runner_chunk)
        stage, last = n, program
        if choice.algorithm == "runner":
            chunk = choice.chunk_elems(itemsize)
            stage = choice.stage_elems(n, itemsize)
            if chunk != runner_chunk:
                program = last = self.programs.get("allreduce", n, chunk)
            if stage < n:
                program = self.programs.get("allreduce", stage, chunk)
                last = program if n % stage == 0 else self.programs.get("allreduce", n % stage, chunk)
        if choice.algorithm == "mpi":
            run = self.mpi_allreduce.run
        elif choice.algorithm == "single_copy":
            run = functools.partial(self.single_copy.allreduce_pieces, program, choice)
        else:
            run = functools.partial(self._allreduce_packed, choice, program, stage, last)
        shape = self._allreduce_shapes[key] = _AllreduceShape(choice, program, stage, last, run)
        if len(self._allreduce_shapes) > self.programs.capacity:
            self._allreduce_shapes.popitem(last=False)
        return shape

    def broadcast(self, buf, root: int) -> None:
        buf = _flat(buf)
        if self.size == 1 or buf.shape[0] == 0:
            return
        if not 0 <= root < self.size:
            raise BackendError(f"broadcast root {root} is not a rank of this job (size {self.size})")
        work = self.buffer(buf.shape[0], buf.dtype)  # on every rank: a window may grow (collective)
        if self.rank == root:
            np.copyto(work, buf)
        choice, program = self._program("broadcast", buf.shape[0], buf.itemsize, root=root)
        # Receives that are the last word on their range land in ``buf`` directly.
        self._run(choice, program, work, out=None if self.rank == root else buf)

    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        send, recv = _flat(send), _flat(recv)
        counts = [int(c) for c in counts]
        self._check_counts(counts, send.shape[0], recv.shape[0], "allgather")
        lo = sum(counts[:self.rank])
        total = sum(counts)
        if self.size == 1:
            np.copyto(recv[:counts[0]], send)
            return
        work = self.buffer(total, send.dtype)
        np.copyto(work[lo:lo + counts[self.rank]], send)
        choice, program = self._program("allgather", total, send.itemsize, counts=counts)
        self._run(choice, program, work, out=recv[:total])

    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp) -> None:
        send, recv = _flat(send), _flat(recv)
        ufunc = kernels.combiner(op)
        counts = [int(c) for c in counts]
        total = sum(counts)
        if len(counts) != self.size or send.shape[0] != total or recv.shape[0] < counts[self.rank]:
            raise BackendError(f"reducescatter: send has {send.shape[0]} elements, recv {recv.shape[0]}, "
                               f"counts {counts} for {self.size} ranks")
        lo, n = sum(counts[:self.rank]), counts[self.rank]
        if self.size == 1:
            np.copyto(recv[:n], send)
            return
        # A private working copy: ``recv`` may alias ``send`` (MPI's in-place convention).
        work = self.buffer(total, send.dtype)
        np.copyto(work, send)
        choice, program = self._program("reducescatter", total, send.itemsize, counts=counts)
        self._run(choice, program, work, ufunc)
        np.copyto(recv[:n], work[lo:lo + n])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.single_copy is not None:
                self.single_copy.close()
                cma.disallow_peers()
            self.wire.close()
            if self.mailbox is not None:
                self.mailbox.close()
            self.arena.close()
            teardown.free(self._wire_comm)

    # ---- helpers -----------------------------------------------------------------------------
    def _check_counts(self, counts, nsend, nrecv, what) -> None:
        if len(counts) != self.size or counts[self.rank] != nsend or nrecv < sum(counts):
            raise BackendError(f"{what}: counts {counts} do not match {self.size} ranks, this rank's "
                               f"{nsend} elements or the {nrecv}-element output")
