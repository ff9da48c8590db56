""":class:`CudaBackend`: Blink's tree collectives on GPUs, one rank per GPU (or several ranks
sharing one, for tests).

Every collective runs the schedule lowered from the job's plan (:mod:`blinkflow.schedule`:
the trees, chunk-pipelined, and across hosts the three-phase all-reduce of Blink §5). The
call-shape policy (:func:`blinkflow.schedule.policy.choose`) picks, per call, who runs it, and
the timeline names its choice:

* ``device``: the device executor (:mod:`.device_executor`): one launch of the interpreter
  kernel runs this rank's block tables for the whole call, chunks handed over through counters in
  peer memory, network edges carried by a proxy thread;
* ``runner``: the host-driven runner (:func:`~blinkflow.schedule.runner.run_program`), the same
  the CPU backend runs, over a :class:`.CudaTransport`: chunks are pushed peer-to-peer into IPC
  receive slots inside a host and travel as MPI messages between hosts; reductions are fused
  CuPy RawKernels, one stream per tree.

Results are bitwise identical on every rank: every element is combined once, at its tree's
root, in the order of the tree's edges, and copied everywhere else.

The all-to-all has no tree plan (every pair exchanges different data): it is staged through
MPI, on device memory when MPI is CUDA-aware, otherwise through host memory.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
from typing import Optional, Sequence

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp, as_reduce_op
from ...schedule import policy
from ...schedule.cache import Programs, ScheduleFor
from ...schedule.device_tables import tables_for
from ...schedule.runner import SequenceState, run_program
from .. import teardown
from ..base import Backend, BackendContext
from ..policy_agreement import agree_policy
from ..wire import MpiWire
from . import kernels, nccl
from .device import cuda_aware_mpi, rank_device, require_cupy
from .device_executor import CALL_TIMEOUT_S, DeviceExecutor, NotCoResident
from .ipc import IpcArena, local_links
from .launch import dtype_name, scale as scale_kernel
from .peers import PeerRoutes, ipc_works
from .transport import CudaTransport, StreamSet

DEFAULT_SLOTS = policy.CUDA_RUNNER_SLOTS
"""Receive slots per (peer, tree): chunks a sender may run ahead of its receiver."""
DEFAULT_ARENA_BYTES = policy.CUDA_ARENA_BYTES
"""Receive-slot memory per rank; the policy caps the runner's chunk so that its slots fit."""
CLOSE_BARRIER_SECONDS = 10.0


class CudaBackend(Backend):
    """The cuda executor. Extra keyword arguments (tests, benchmarks): ``nslots``,
    ``arena_bytes`` (receive-slot memory per rank), ``schedule_for`` (replaces lowering the
    context's plans, see :data:`blinkflow.schedule.cache.ScheduleFor`)."""

    name = "cuda"

    def __init__(self, ctx: BackendContext, *, nslots: int = DEFAULT_SLOTS, arena_bytes: int = DEFAULT_ARENA_BYTES,
                 schedule_for: Optional[ScheduleFor] = None, device_timeout: float = CALL_TIMEOUT_S):
        cupy = require_cupy()
        self.cupy = cupy
        self.ctx = ctx
        self.layout = layout = ctx.layout
        self.comm = ctx.comm
        self.nslots = nslots
        self.arena_bytes = arena_bytes
        self._max_channels = 1  # most trees of any schedule so far; sizes slots and chunks
        self.local_comm = ctx.local_comm.Dup()  # the arena's collectives only
        self.local_devices = layout.local_devices
        if len(set(self.local_devices)) != len(self.local_devices):
            raise BackendError(f"ranks {layout.local_ranks} on one host drive topology devices {self.local_devices}; "
                               "each rank needs its own device id (give shared GPUs distinct virtual ids)")
        self.device = rank_device(layout)
        self._dev = cupy.cuda.Device(self.device)
        with self._dev:
            self._routes = PeerRoutes(cupy.cuda.runtime, self.device)
        self._wire_comm = self.comm.Dup()
        self.wire = MpiWire(self._wire_comm, failure=ctx.failure)
        self._streams = StreamSet()
        gpus = self.local_comm.allgather(self._routes.gpu)
        self._ipc_pair = [[ipc_works(a, b) for b in gpus] for a in gpus]
        """``[i][j]``: local ranks i and j exchange through the IPC arena (else over MPI: two MIG
        instances of one GPU); the same matrix on every local rank."""
        mine = layout.local_rank_of[layout.rank]
        by_ipc = [layout.same_host(r) and self._ipc_pair[mine][layout.local_rank_of[r]] for r in range(layout.size)]
        self.transport = CudaTransport(self.wire, layout, self._streams, cuda_aware_mpi(), by_ipc=by_ipc)
        self.state = SequenceState()
        config = ctx.config
        self.programs = Programs(ctx.plan_for, layout.devices, layout.rank, fuse_inputs=kernels.MAX_INPUTS - 1,
                                 schedule_for=schedule_for, check=bool(config is not None and config.check_schedules),
                                 window=policy.DEVICE_WINDOW, proven=config.check_cache if config is not None else None)
        nccl_usable = schedule_for is None and nccl.usable(cupy, self.comm, self.local_comm, self._routes.bus_id)
        self.caps = policy.Capabilities("cuda", device_executor=self._every_local_pair_maps(), nccl=nccl_usable,
                                        arena_bytes=arena_bytes, runner_slots=nslots)
        self._nccl = nccl.NcclAllreduce(cupy, self.comm, self.device) if nccl_usable else None
        self._rates: Optional[policy.PlanRates] = None
        self.last_choice: Optional[policy.Choice] = None
        """The policy's choice for the latest collective (tests, debugging)."""
        self._call_shapes: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
        """Call shape -> (choice, chunk, program): the policy is asked once per shape (see :meth:`_program`)."""
        agree_policy(self.comm, config, self.caps, layout)
        self._device_comm = self.comm.Dup()  # the proxy's network edges only
        self.executor = DeviceExecutor(cupy, self._device_comm, self.local_comm, layout, self._routes,
                                       timeout=device_timeout)
        self._arena: Optional[IpcArena] = None
        self._arena_channels = 0
        self._fusion = None
        self._closed = False

    def device_scope(self):
        """A context in which the calling thread works on this rank's GPU (CuPy's arrays, kernels
        and current stream follow the thread's current device; every thread starts on device 0)."""
        return self.cupy.cuda.Device(self.device)

    def _every_local_pair_maps(self) -> bool:
        """Whether the device executor can run here: its blocks write peers' memory directly, so
        every rank of every host must be able to map every local peer's GPU (CUDA says so; a
        pair without a peer path, or a peer GPU this process cannot see, leaves the job on the
        runner, which stages such links through the host). Collective; the same on every rank."""
        from mpi4py import MPI

        mine = all(self._routes.can_map(gpu) is True for gpu in self.local_comm.allgather(self._routes.gpu))
        return bool(self.comm.allreduce(int(mine), op=MPI.MIN))

    # ---- buffers ----------------------------------------------------------------------------
    def buffer(self, nelems: int, dtype):
        dtype = np.dtype(dtype)
        nbytes = max(16, nelems * dtype.itemsize)
        with self._dev:
            if self._fusion is None or self._fusion.nbytes < nbytes:
                self._fusion = None  # free the old one first: fusion buffers are large
                self._fusion = self.cupy.empty(nbytes, dtype=self.cupy.uint8)
            return self._fusion[:nelems * dtype.itemsize].view(dtype)

    # ---- collectives ------------------------------------------------------------------------
    def allreduce(self, buf, op: ReduceOp, out=None, scale: float = 1.0) -> None:
        """In place, or into ``out`` times ``scale`` (see Backend.allreduce)."""
        op = as_reduce_op(op).combiner
        name = self._check(buf, reduce=True)
        if buf.size and self.layout.size > 1:
            with self._dev:
                self._run("allreduce", buf.reshape(-1), name, op)
        if out is not None:
            with self._dev:
                out[...] = buf
                self.scale(out, scale)

    def _pack(self, pieces, buf) -> None:
        """Backend.allreduce_pieces' packing, on this rank's GPU: one kernel launch for a step's
        hundreds of gradients."""
        if pieces:
            with self._dev:
                self.cupy.concatenate(pieces, out=buf)

    def broadcast(self, buf, root: int) -> None:
        self._check(buf, reduce=False)
        if buf.size == 0 or self.layout.size == 1:
            return
        with self._dev:
            self._run("broadcast", buf.reshape(-1), None, None, root=root)

    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        counts = [int(c) for c in counts]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        me = self.layout.rank
        self._check(recv, reduce=False)
        if send.size != counts[me] or recv.size != offsets[-1]:
            raise BackendError(f"allgather: send has {send.size} elements (counts say {counts[me]}), "
                               f"recv {recv.size} (counts sum to {offsets[-1]})")
        with self._dev:
            recv[offsets[me]:offsets[me + 1]] = send.reshape(-1)
            if self.layout.size > 1 and recv.size:
                self._run("allgather", recv.reshape(-1), None, None, counts=counts)

    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp) -> None:
        counts = [int(c) for c in counts]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        me = self.layout.rank
        name = self._check(send, reduce=True)
        if send.size != offsets[-1] or recv.size != counts[me]:
            raise BackendError(f"reducescatter: send has {send.size} elements (counts sum to {offsets[-1]}), "
                               f"recv {recv.size} (counts say {counts[me]})")
        with self._dev:
            work = send.reshape(-1).copy()  # the schedule reduces in place in the full buffer
            if self.layout.size > 1 and work.size:
                self._run("reducescatter", work, name, as_reduce_op(op).combiner, counts=counts)
            recv.reshape(-1)[...] = work[offsets[me]:offsets[me + 1]]

    @contextlib.contextmanager
    def _mpi_buffers(self, send, recv):
        """The all-to-all's memory for MPI (see Backend.alltoall): device memory itself where MPI
        is CUDA-aware (after the stream's work on it), else host copies staged through."""
        with self._dev:
            if cuda_aware_mpi():
                self.cupy.cuda.get_current_stream().synchronize()
                yield send.reshape(-1).view(self.cupy.uint8), recv.reshape(-1).view(self.cupy.uint8)
                return
            host_recv = np.empty(recv.nbytes, dtype=np.uint8)
            yield self.cupy.asnumpy(send.reshape(-1)).view(np.uint8), host_recv
            recv.reshape(-1).set(host_recv.view(recv.dtype))

    def scale(self, buf, factor: float) -> None:
        if factor == 1.0 or buf.size == 0:
            return
        name = dtype_name(buf.dtype)
        if name not in kernels.CTYPES:
            return super().scale(buf, factor)
        with self._dev:
            scale_kernel(buf.reshape(-1), factor)

    def quiesce(self) -> None:
        with self._dev:
            self._dev.synchronize()

    def close_after_loss(self) -> None:
        # The lost peers' copies died with their processes; the survivors synchronized first.
        self.close(peers_quiet=True)

    def close(self, peers_quiet: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with self._dev:
                self._dev.synchronize()
                if self._nccl is not None:
                    self._nccl.close()
                # Nobody may still write into (or map) memory we free: a slower peer's last
                # block may still post a counter into the device executor's memory, or copy into
                # the arena. So every rank unmaps its peers' memory, the host's ranks meet, and
                # then each frees its own. After a peer failed the barrier never completes: then
                # leave the memory to process exit.
                self.executor.unmap_peers()
                quiet = peers_quiet or _barrier_within(self.local_comm, CLOSE_BARRIER_SECONDS)
                if quiet:
                    self.executor.free()
                if self._arena is not None:
                    if quiet:
                        self._arena.close()
                    self._arena = None
                self._streams.close()
                self._fusion = None
        finally:
            self.wire.close()
            teardown.free(self._wire_comm)
            teardown.free(self._device_comm)
            teardown.free(self.local_comm)

    # ---- internals --------------------------------------------------------------------------
    def _check(self, buf, reduce: bool) -> str:
        """The kernels' name of ``buf``'s dtype, once ``buf`` is one this backend can work on."""
        if not isinstance(buf, self.cupy.ndarray):
            raise BackendError(f"the cuda backend works on cupy arrays, got {type(buf).__name__}")
        if not buf.flags.c_contiguous:
            raise BackendError("the cuda backend needs C-contiguous buffers")
        if buf.device.id != self.device:
            raise BackendError(f"buffer lives on GPU {buf.device.id}; this rank drives GPU {self.device} (make the "
                               f"arrays there: cupy.cuda.Device({self.device}).use())")
        current = self.cupy.cuda.runtime.getDevice()
        if current != self.device:
            raise BackendError(f"called from a thread on GPU {current}; this rank drives GPU {self.device}, and its "
                               "callers must work there too (backend.device_scope())")
        name = dtype_name(buf.dtype)
        if reduce and name not in kernels.CTYPES:
            raise BackendError(f"the cuda backend reduces {', '.join(kernels.CTYPES)}; got {name}")
        return name

    def _choose(self, collective: str, nbytes: int, itemsize: int) -> policy.Choice:
        """The policy's algorithm and chunk for this call (the same on every rank: its inputs were
        agreed at construction, and the trees so far are every rank's)."""
        rates = None
        if self.caps.nccl and collective == "allreduce":
            if self._rates is None:  # the agreed plan and topology: the same on every rank
                self._rates = policy.plan_rates(self.ctx.plan_for("allreduce"), self.ctx.topology)
            rates = self._rates
        choice = policy.choose(collective, nbytes, itemsize, self.layout, self.ctx.config, self.caps,
                               ntrees=self._max_channels, rates=rates)
        self.last_choice = choice
        return choice

    def _program(self, collective: str, nelems: int, itemsize: int, root=None, counts=None):
        """This call's choice, chunk and program, decided once per call shape: the policy's
        other inputs are fixed, except the most trees of any schedule so far and whether the
        device executor is offered, and when either changes every shape is decided afresh (on
        every rank: they all see the same schedules in the same order). A schedule with more
        trees than any before changes the chunk (the runner's arena share, the device
        executor's per-tree chunk), so its own shape is decided once more."""
        key = (collective, nelems, itemsize, root, None if counts is None else tuple(counts))
        known = self._call_shapes.get(key)
        if known is not None:
            self._call_shapes.move_to_end(key)
            self.last_choice = known[0]
            return known
        while True:
            choice = self._choose(collective, nelems * itemsize, itemsize)
            if choice.algorithm == "nccl":
                decided = (choice, 0, None)  # NCCL chunks on its own
                break
            chunk = choice.chunk_elems(itemsize)
            program = self.programs.get(collective, nelems, chunk, root=root, counts=counts)
            if program.nchannels <= self._max_channels:
                decided = (choice, chunk, program)
                break
            self._max_channels = program.nchannels
            self._call_shapes.clear()
        self._call_shapes[key] = decided
        if len(self._call_shapes) > self.programs.capacity:
            self._call_shapes.popitem(last=False)
        return decided

    def _ensure_arena(self, program, slot_bytes: int) -> None:
        """Receive slots for the host's links that the schedules so far use (rebuilt when a
        schedule uses a new one; smaller when ``_max_channels`` grows; larger when a program's
        chunk outgrows them)."""
        arena = self._arena
        rank_of, layout = self.programs.rank_of, self.layout
        links = frozenset(link for link in local_links(program.schedule, lambda d: layout.local_rank_of[rank_of[d]],
                                                       lambda d: layout.same_host(rank_of[d]))
                          if self._ipc_pair[link[0]][link[1]])
        if arena is not None:
            if links <= arena.links and self._arena_channels == self._max_channels and slot_bytes <= arena.slot_bytes:
                return
            links = links | arena.links
        # Every local rank runs the same schedules in the same order, so all rebuild together.
        if arena is not None:
            self._dev.synchronize()
            self.local_comm.Barrier()  # no peer still copies into (or reads) the old slots
            arena.close()
            self._arena = None
            self.state.reset()
        # Bytes: the policy's smallest slot, or a larger buffer's chunk (above), the same call on
        # every local rank.
        per_slot = policy.cuda_arena_slot_bytes(layout, self.ctx.config, self.caps, self._max_channels)
        self._arena = IpcArena(self.local_comm, links, self.nslots, max(slot_bytes, per_slot), self._routes)
        self._arena_channels = self._max_channels

    def _run(self, collective: str, buf, dtype: Optional[str], op: Optional[ReduceOp], root=None, counts=None) -> None:
        choice, chunk, program = self._program(collective, buf.size, buf.dtype.itemsize, root=root, counts=counts)
        if choice.algorithm == "device":
            tables = tables_for(program, self.programs.rank_of, choice.window, self.programs.fuse_inputs)
            key = (collective, buf.size, chunk, root, None if counts is None else tuple(counts), buf.dtype.itemsize)
            if not self._device_fits(key, tables, buf, dtype, op):
                choice, chunk, program = self._program(collective, buf.size, buf.dtype.itemsize, root=root,
                                                       counts=counts)
        self._mark("start", choice.phase)
        try:
            if choice.algorithm == "nccl":
                self._nccl.allreduce(buf, op)
            elif choice.algorithm == "device":
                self.executor.run(key, tables, buf, dtype, op)
            else:
                self._ensure_arena(program, program.slot_elems * buf.dtype.itemsize)
                self.transport.prepare(self._arena, buf, dtype, op)
                run_program(program, self.transport, self.state)
        finally:
            self._mark("end", choice.phase)

    def _device_fits(self, key: tuple, tables, buf, dtype: Optional[str], op) -> bool:
        """Whether the device executor can run this call shape (the same answer on every rank).
        Where its grid cannot be co-resident, a job that chose it by policy continues on the
        runner (the policy no longer offers the device executor); a job that asked for it
        (``BLINKFLOW_ALGORITHM=device``) gets the BackendError."""
        try:
            self.executor.prepare(key, tables, buf, dtype, op)
            return True
        except NotCoResident:
            if getattr(self.ctx.config, "algorithm", "auto") == "device":
                raise
            self.caps = dataclasses.replace(self.caps, device_executor=False)
            self._call_shapes.clear()   # every shape's choice offered the device executor
            return False


def _barrier_within(comm, seconds: float) -> bool:
    """A barrier that gives up after ``seconds`` (a dead peer must not hang shutdown)."""
    import time

    request = comm.Ibarrier()
    deadline = time.monotonic() + seconds
    while not request.Test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
