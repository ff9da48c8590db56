""":class:`CudaBackend`: Blink's tree collectives on GPUs, one rank per GPU (or several ranks
sharing one, for tests).

Within a host the schedule lowered from the plan runs on the IPC executor (``program`` ->
``pipeline`` -> ``issuer`` over an ``ipc`` arena): chunks are pushed peer-to-peer into receive
slots, reduced and forwarded by one fused kernel, on one stream per tree. Across hosts the
all-reduce follows Blink's three phases (§5): inside each host the shard of every rank is
reduced (over the plan's intra-host trees, or one hop to its owner when the plan has none),
one shard per rank is all-reduced across hosts (``crosshost``), and the shards are all-gathered
inside each host. Results are bitwise identical on every rank: inside a host every
element is combined once, at its tree's root, and broadcast; across hosts every rank combines
the gathered shards in the same order.

Collectives without a tree path here yet (alltoall; broadcast, all-gather and reduce-scatter
across hosts) are staged through MPI, on device memory when MPI is CUDA-aware, otherwise
through host memory. They are correct, not fast.
"""
from __future__ import annotations

import collections
from typing import Callable, Optional, Sequence

import numpy as np

from ...errors import BackendError, PlanError
from ...ops import ReduceOp, as_reduce_op
from ...planner.plan import split_counts
from ..base import Backend, BackendContext
from . import kernels
from .crosshost import CrossHost
from .device import choose_device, cuda_aware_mpi, require_cupy
from .ipc import IpcArena
from .issuer import CupyIssuer, StreamSet
from .launch import dtype_name, scale as scale_kernel
from .messenger import MpiMessenger
from .pipeline import SequenceState, run_program
from .program import RankProgram, compile_program
from .schedules import direct_allgather_schedule, direct_reducescatter_schedule

DEFAULT_CHUNK_BYTES = 1 << 20
"""Pipeline chunk when ``BLINKFLOW_CHUNK_BYTES`` is 0: large enough to run copies near link
bandwidth, small enough that an 8-GPU tree fills its pipeline on a 64 MiB fusion buffer."""
DEFAULT_SLOTS = 4
"""Receive slots per (peer, tree): chunks a sender may run ahead of its receiver."""
DEFAULT_ARENA_BYTES = 256 << 20
"""Receive-slot memory per rank. Slots exist for every (local sender, tree, slot), so plans with
many trees (28 on a full DGX-1) get smaller chunks rather than more memory."""
_PROGRAM_CACHE = 64
CLOSE_BARRIER_SECONDS = 10.0

ScheduleFor = Callable[..., object]
"""``schedule_for(collective, root_device, nelems, chunk_elems, scope, shard_counts=None) ->
Schedule``; scope is "job" or "host" (the intra-host part of a three-phase plan);
``shard_counts`` (all-gather, reduce-scatter) maps each device to its shard's element count."""


class CudaBackend(Backend):
    """The cuda executor. Extra keyword arguments (tests, benchmarks): ``nslots``,
    ``arena_bytes`` (receive-slot memory per rank), ``schedule_for`` (replaces lowering the
    context's plans), ``cross_transport`` ("nccl" | "cuda-mpi" | "staged")."""

    name = "cuda"

    def __init__(self, ctx: BackendContext, *, nslots: int = DEFAULT_SLOTS, arena_bytes: int = DEFAULT_ARENA_BYTES,
                 schedule_for: Optional[ScheduleFor] = None, cross_transport: Optional[str] = None):
        cupy = require_cupy()
        self.cupy = cupy
        self.ctx = ctx
        self.comm = ctx.comm
        self.nslots = nslots
        self.arena_bytes = arena_bytes
        self._max_channels = 1  # most trees of any schedule so far; sizes slots and chunks
        self._schedule_for = schedule_for or self._lowered_schedule
        self.local_comm = ctx.local_comm.Dup()  # the executor's control messages only
        self.local_rank = self.local_comm.rank
        self.local_globals = tuple(self.local_comm.allgather(self.comm.rank))
        self.local_devices = tuple(ctx.devices[g] for g in self.local_globals)
        if len(set(self.local_devices)) != len(self.local_devices):
            raise BackendError(f"ranks {self.local_globals} on one host drive topology devices {self.local_devices}; "
                               "each rank needs its own device id (give shared GPUs distinct virtual ids)")
        self.device = choose_device(self.local_rank, self.local_devices, cupy.cuda.runtime.getDeviceCount())
        self._dev = cupy.cuda.Device(self.device)
        self.multi_host = self.local_comm.size != self.comm.size
        with self._dev:
            shared_gpu = not _gpus_distinct(self.comm, self.device)
            if self.multi_host and cross_transport is None and shared_gpu:
                cross_transport = "cuda-mpi" if cuda_aware_mpi() else "staged"  # NCCL refuses a shared GPU
            self.cross = CrossHost(ctx.cross_comm, cross_transport) if self.multi_host else None
        self._streams = StreamSet()
        self._messenger = MpiMessenger(self.local_comm)
        self._state = SequenceState()
        self._arena: Optional[IpcArena] = None
        self._programs: "collections.OrderedDict" = collections.OrderedDict()
        self._fusion = None
        self._closed = False

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
    def allreduce(self, buf, op: ReduceOp, out=None, scale: float = 1.0, dtype: Optional[str] = None) -> None:
        """In place, or into ``out`` times ``scale`` (see Backend.allreduce). ``dtype="bfloat16"``
        reduces a ``uint16`` cupy array as bfloat16."""
        op = as_reduce_op(op).combiner
        name = self._check(buf, dtype, reduce=True)
        if buf.size and self.comm.size > 1:
            with self._dev:
                if not self.multi_host:
                    self._run(self._planned("allreduce", None, buf, "job"), buf, name, op)
                else:
                    self._three_phase_allreduce(buf, name, op)
        if out is not None:
            with self._dev:
                out[...] = buf
                self.scale(out, scale)

    def broadcast(self, buf, root: int) -> None:
        self._check(buf, None, reduce=False)
        if buf.size == 0 or self.comm.size == 1:
            return
        with self._dev:
            if self.multi_host:
                self._staged(lambda host: self.comm.Bcast(host, root=root), buf)
            else:
                self._run(self._planned("broadcast", self.ctx.devices[root], buf, "job"), buf, None, None)

    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        counts = [int(c) for c in counts]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        me = self.comm.rank
        self._check(recv, None, reduce=False)
        if send.size != counts[me] or recv.size != offsets[-1]:
            raise BackendError(f"allgather: send has {send.size} elements (counts say {counts[me]}), "
                               f"recv {recv.size} (counts sum to {offsets[-1]})")
        with self._dev:
            recv[offsets[me]:offsets[me + 1]] = send.reshape(-1)
            if self.comm.size == 1 or recv.size == 0:
                return
            if self.multi_host:
                self._staged(lambda host: self.comm.Allgatherv(host[offsets[me]:offsets[me + 1]].copy(),
                                                               [host, counts]), recv)
                return
            shards = tuple((self.ctx.devices[r], int(offsets[r]), counts[r]) for r in range(self.comm.size))
            sched = self._planned("allgather", None, recv, "job", shards=shards)
            if sched is None:  # no tree plan: one hop to everyone
                sched = self._sized(("direct-allgather", shards, recv.size), recv.dtype.itemsize,
                                    lambda chunk: direct_allgather_schedule(tuple(self.ctx.devices), shards, recv.size, chunk))
            self._run(sched, recv, None, None)

    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp, dtype: Optional[str] = None) -> None:
        counts = [int(c) for c in counts]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        me = self.comm.rank
        name = self._check(send, dtype, reduce=True)
        if send.size != offsets[-1] or recv.size != counts[me]:
            raise BackendError(f"reducescatter: send has {send.size} elements (counts sum to {offsets[-1]}), "
                               f"recv {recv.size} (counts say {counts[me]})")
        with self._dev:
            work = send.reshape(-1).copy()  # the IR reduces in place in the full buffer
            if self.comm.size > 1 and work.size:
                op = as_reduce_op(op).combiner
                shards = tuple((self.ctx.devices[r], int(offsets[r]), counts[r]) for r in range(self.comm.size))
                if self.multi_host:  # three-phase all-reduce, keep our slice
                    self.allreduce(work, op, dtype=dtype)
                else:
                    sched = self._planned("reducescatter", None, work, "job", shards=shards)
                    if sched is None:  # no tree plan: one hop to each owner
                        sched = self._sized(("direct-reducescatter", shards, work.size), work.dtype.itemsize,
                                            lambda chunk: direct_reducescatter_schedule(tuple(self.ctx.devices), shards,
                                                                                        work.size, chunk))
                    self._run(sched, work, name, op)
            recv.reshape(-1)[...] = work[offsets[me]:offsets[me + 1]]

    def alltoall(self, send, send_counts: Sequence[int], recv, recv_counts: Sequence[int]) -> None:
        send_counts = [int(c) for c in send_counts]
        recv_counts = [int(c) for c in recv_counts]
        with self._dev:
            if cuda_aware_mpi():
                self.cupy.cuda.get_current_stream().synchronize()
                self.comm.Alltoallv([send, send_counts], [recv, recv_counts])
                return
            host_send = self.cupy.asnumpy(send.reshape(-1))
            host_recv = np.empty(recv.size, dtype=host_send.dtype)
            self.comm.Alltoallv([host_send, send_counts], [host_recv, recv_counts])
            recv.reshape(-1).set(host_recv)

    def scale(self, buf, factor: float) -> None:
        if factor == 1.0 or buf.size == 0:
            return
        name = dtype_name(buf.dtype)
        if name not in kernels.CTYPES:
            return super().scale(buf, factor)
        with self._dev:
            scale_kernel(buf.reshape(-1), factor)

    def barrier(self) -> None:
        with self._dev:
            self.cupy.cuda.get_current_stream().synchronize()
        self.comm.Barrier()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with self._dev:
                self._dev.synchronize()
                if self._arena is not None:
                    # Nobody may still copy into an arena we free. After a peer failed the
                    # barrier never completes: then leave the memory to process exit.
                    if _barrier_within(self.local_comm, CLOSE_BARRIER_SECONDS):
                        self._arena.close()
                    self._arena = None
                if self.cross is not None:
                    self.cross.close()
                self._streams.close()
                self._fusion = None
        finally:
            self.local_comm.Free()

    # ---- internals --------------------------------------------------------------------------
    def _check(self, buf, dtype: Optional[str], reduce: bool) -> Optional[str]:
        if not isinstance(buf, self.cupy.ndarray):
            raise BackendError(f"the cuda backend works on cupy arrays, got {type(buf).__name__}")
        if not buf.flags.c_contiguous:
            raise BackendError("the cuda backend needs C-contiguous buffers")
        if buf.device.id != self.device:
            raise BackendError(f"buffer lives on GPU {buf.device.id}; this rank drives GPU {self.device}")
        name = dtype or dtype_name(buf.dtype)
        if reduce and name not in kernels.CTYPES:
            raise BackendError(f"the cuda backend reduces {', '.join(kernels.CTYPES)}; got {name}")
        return name

    def _chunk_elems(self, itemsize: int) -> int:
        """Pipeline chunk: the configured size, capped so that a slot for every (local sender,
        tree, slot) fits ``arena_bytes``."""
        per_slot = self.arena_bytes // (self.local_comm.size * self._max_channels * self.nslots)
        chunk_bytes = min(self.ctx.config.chunk_bytes or DEFAULT_CHUNK_BYTES, max(256, per_slot // 256 * 256))
        return max(1, chunk_bytes // itemsize)

    def _cached(self, key, make):
        hit = self._programs.get(key)
        if hit is None:
            hit = make()
            self._programs[key] = hit
            if len(self._programs) > _PROGRAM_CACHE:
                self._programs.popitem(last=False)
        else:
            self._programs.move_to_end(key)
        return hit

    def _sized(self, key, itemsize: int, make):
        """``make(chunk_elems)``, memoised, with chunks small enough for the arena. A schedule
        with more trees than any before shrinks the chunk, so it is made once more."""
        while True:
            chunk = self._chunk_elems(itemsize)
            sched = self._cached((key, chunk), lambda: make(chunk))
            if sched.nchannels <= self._max_channels:
                return sched
            self._max_channels = sched.nchannels

    def _planned(self, collective: str, root_device, buf, scope: str, shards=None):
        """The tree schedule of this call shape. With ``shards`` (all-gather, reduce-scatter)
        None when no plan can serve them, so the caller falls back to a one-hop schedule."""
        counts = None if shards is None else {d: c for d, _, c in shards}
        key = (collective, root_device, buf.size, scope, None if shards is None else tuple(shards))

        def make(chunk):
            return self._schedule_for(collective, root_device, buf.size, chunk, scope, shard_counts=counts)

        if shards is None:
            return self._sized(key, buf.dtype.itemsize, make)
        try:
            sched = self._sized(key, buf.dtype.itemsize, make)
        except (BackendError, PlanError):
            return None
        return sched if tuple(tuple(x) for x in sched.shards) == tuple(shards) else None

    def _lowered_schedule(self, collective: str, root_device, nelems: int, chunk_elems: int, scope: str,
                          shard_counts=None):
        try:
            from ...schedule.lower import lower
        except ImportError as e:
            raise BackendError("the cuda backend runs schedules lowered by blinkflow.schedule.lower, "
                               "which is not installed") from e
        plan = self.ctx.plan_for(collective, root=root_device) if root_device is not None else self.ctx.plan_for(collective)
        if scope == "host":
            mine = self.ctx.devices[self.comm.rank]
            hosts = [p for p in getattr(plan, "intra", ()) if mine in p.devices]
            if not hosts:
                raise BackendError(f"a multi-host {collective} needs a three-phase plan (Blink §5); "
                                   f"the plan for device {mine} has no intra-host part")
            plan = hosts[0]
        counts = None if shard_counts is None else [shard_counts[d] for d in plan.devices]
        return lower(plan, nelems, chunk_elems, shard_counts=counts)

    def _program(self, schedule) -> RankProgram:
        me = self.ctx.devices[self.comm.rank]
        # The entry keeps ``schedule`` alive, so its id cannot be reused while the entry exists.
        return self._cached(("program", id(schedule), me),
                            lambda: (schedule, compile_program(schedule, me, _RankOf(self.local_devices, schedule))))[1]

    def _ensure_arena(self, slot_bytes: int) -> None:
        """Receive slots for ``_max_channels`` trees (rebuilt, smaller, when that grows)."""
        arena = self._arena
        if arena is not None and arena.nchannels == self._max_channels and slot_bytes <= arena.slot_bytes:
            return
        # Every local rank runs the same schedules in the same order, so all rebuild together.
        if arena is not None:
            self._dev.synchronize()
            self.local_comm.Barrier()  # no peer still copies into (or reads) the old slots
            arena.close()
            self._arena = None
            self._state.reset()
        per_slot = self._chunk_elems(1)  # bytes: the cap every chunk of every dtype respects
        self._arena = IpcArena(self.local_comm, self._max_channels, self.nslots, max(slot_bytes, per_slot))

    def _run(self, schedule, buf, dtype: Optional[str], op: Optional[ReduceOp]) -> None:
        program = self._program(schedule)
        self._ensure_arena(program.slot_elems * buf.dtype.itemsize)
        issuer = CupyIssuer(self._arena, self._streams, buf.reshape(-1), dtype, op)
        run_program(program, issuer, self._messenger, self._state)

    def _three_phase_allreduce(self, buf, name: str, op: ReduceOp) -> None:
        nlocal = self.local_comm.size
        counts = split_counts([1.0] * nlocal, buf.size)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        shards = tuple((self.local_devices[i], int(offsets[i]), counts[i]) for i in range(nlocal))
        itemsize = buf.dtype.itemsize
        if nlocal > 1:
            # Phase 1: our shard must hold the host's sum. Over the plan's intra-host trees when
            # it has them (an all-reduce: every shard is then complete), else one hop per shard.
            try:
                sched = self._planned("allreduce", None, buf, "host")
            except (BackendError, PlanError):
                sched = self._sized(("three-phase-scatter", shards, buf.size), itemsize,
                                    lambda chunk: direct_reducescatter_schedule(self.local_devices, shards, buf.size, chunk))
            self._run(sched, buf, name, op)
        lo, hi = offsets[self.local_rank], offsets[self.local_rank + 1]
        self.cross.allreduce(buf[lo:hi], op, name)  # phase 2: our shard, across hosts
        if nlocal > 1:  # phase 3: gather the shards inside the host
            sched = self._sized(("three-phase-gather", shards, buf.size), itemsize,
                                lambda chunk: direct_allgather_schedule(self.local_devices, shards, buf.size, chunk))
            self._run(sched, buf, None, None)

    def _staged(self, mpi_call, buf) -> None:
        """Run the in-place ``mpi_call`` on ``buf``: on device memory when MPI is CUDA-aware,
        otherwise on a host copy that is written back."""
        flat = buf.reshape(-1)
        if cuda_aware_mpi():
            self.cupy.cuda.get_current_stream().synchronize()
            mpi_call(flat)
            return
        host = self.cupy.asnumpy(flat)
        mpi_call(host)
        flat.set(host)


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


class _RankOf(dict):
    """Schedule device -> local rank (the executor messages on the host's communicator)."""

    def __init__(self, local_devices, schedule):
        super().__init__((d, i) for i, d in enumerate(local_devices))
        missing = [d for d in schedule.devices if d not in self]
        if missing:
            raise BackendError(f"schedule devices {missing} are not on this host ({list(local_devices)}); "
                               "cross-host transfers go through the three-phase path")


def _gpus_distinct(comm, device: int) -> bool:
    """Whether every rank of the job drives a different physical GPU (host name + PCI bus id)."""
    import socket

    import cupy

    key = (socket.gethostname(), cupy.cuda.runtime.deviceGetPCIBusId(device))
    keys = comm.allgather(key)
    return len(set(keys)) == len(keys)
