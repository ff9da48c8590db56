"""The device executor on the cuda backend: one launch of ``kernels/interpreter.cu`` runs this
rank's whole program for a call, block by block (:mod:`blinkflow.schedule.device_tables`).

Per call shape (collective, size, chunk, root/counts, dtype) this rank keeps a
:class:`ShapeMemory`, made once, together on every local rank (they run the same shapes in the
same order), sized by the connections the shape's tables use (one ring of ``window`` slots per
(peer, channel) it receives on, nothing for pairs it does not use):

* in **device memory**, shared with the host's other ranks through CUDA IPC: the rings and
  ``tail`` counters of its receive connections from local peers, the ``head`` counters of its
  sends to local peers, and per-block ``progress``; a sender writes its chunks and the tail
  straight into the receiver's memory, the receiver its head into the sender's (NCCL's Simple
  protocol);
* in **pinned host memory mapped into the device**: the connections to other hosts (rings and
  counters the :class:`~.proxy.Proxy` thread moves over MPI) and the abort flag.

The host does per call: (the caller packs,) one launch, one event, and waits for the event
while the proxy carries the network edges and watches the deadline. Counters continue across
calls (:mod:`blinkflow.backends.device_abi`), so nothing is reset between launches.

What keeps it safe:

* the counters are zeroed, and the zeroing has *run* (``cudaMemset`` is asynchronous to the
  host), before the IPC handle is published: a peer's first post is never overwritten;
* the launch is cooperative (``cudaLaunchCooperativeKernel``): the blocks wait for each other, so
  they must be resident together, which only a cooperative launch guarantees; one that cannot be
  fails at once instead of hanging. Before a call shape's first launch an empty cooperative launch
  of its grid probes this, and the job agrees: where any rank's grid does not fit, every rank
  raises :class:`NotCoResident` and the backend runs that call on the runner;
* a launch that fails leaves nothing behind: the proxy ends that call, its error is that call's,
  and the abort flag is lowered again for the next one;
* memory goes in two steps (:meth:`DeviceExecutor.unmap_peers`, then :meth:`DeviceExecutor.free`,
  with a barrier of the host between them, see the backend's ``close``): a rank frees its rings
  and counters only once every local peer has stopped writing into them and unmapped them.
"""
from __future__ import annotations

import collections
import ctypes
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...errors import BackendError
from ...schedule import device_geometry
from ...schedule.device_tables import RankTables
from .. import device_abi as abi
from ..host_memory import view
from ..stuck_blocks import describe, stuck_blocks
from ..teardown import quietly
from . import kernels
from .proxy import Edge, Proxy

THREADS = device_geometry.THREADS
"""Threads per block: a step's copy or reduction is spread over them (blocks per connection and
loads in flight: :mod:`blinkflow.schedule.device_geometry`)."""
SHAPES_KEPT = 16
"""Call shapes whose memory a rank keeps (least recently used ones go first): a training step has
a handful; each holds its connections' rings."""
CALL_TIMEOUT_S = 60.0
"""A launch that is not done by then is aborted (a dead or stalled peer): every block returns
and the call raises a BackendError."""
_HOST_ALLOC_FLAGS = 0x1 | 0x2  # cudaHostAllocPortable | cudaHostAllocMapped: the device reads it (UVA)
_ALIGN = 256


class NotCoResident(BackendError):
    """A call shape's grid cannot be resident at once on some rank's GPU (raised on every rank)."""


class _Layout:
    """Offsets in one allocation, handed out in order."""

    def __init__(self):
        self.size = 0

    def take(self, nbytes: int) -> int:
        at = self.size
        self.size += -(-max(8, nbytes) // _ALIGN) * _ALIGN
        return at


class ShapeMemory:
    """This rank's rings, counters and launch arrays for one call shape (see the module)."""

    def __init__(self, tables: RankTables, itemsize: int, local_of: Dict[int, int], local_comm, routes, cupy):
        rt = cupy.cuda.runtime
        self.rt = rt
        self.tables = t = tables
        self.encoded = enc = abi.encode(t)
        self.itemsize = itemsize
        self.slot_bytes = enc.slot_elems * itemsize
        ring = enc.window * self.slot_bytes
        dev, host = _Layout(), _Layout()
        # Receive connections: ring and tail here (device memory for local senders, host memory
        # for the proxy), plus for a remote sender the head the block posts for the proxy.
        self.recv_at: Dict[Tuple[int, int], Tuple[str, int, int, int]] = {}
        for c in t.recvs:
            if c.peer in local_of:
                self.recv_at[(c.peer, c.channel)] = ("dev", dev.take(ring), dev.take(8), -1)
            else:
                self.recv_at[(c.peer, c.channel)] = ("host", host.take(ring), host.take(8), host.take(8))
        # Send connections: the head here; for a remote receiver the outbox ring and its tail.
        self.send_at: Dict[Tuple[int, int], Tuple[str, int, int, int]] = {}
        for c in t.sends:
            if c.peer in local_of:
                self.send_at[(c.peer, c.channel)] = ("dev", dev.take(8), -1, -1)
            else:
                self.send_at[(c.peer, c.channel)] = ("host", host.take(8), host.take(ring), host.take(8))
        progress_at = dev.take(8 * enc.nblocks)
        abort_at = host.take(8)
        self.device_base = self.host_base = 0
        self._opened: List[int] = []
        error = None
        try:
            self.device_base = rt.malloc(dev.size)
            rt.memset(self.device_base, 0, dev.size)
            # cudaMemset may still be queued: a peer that maps the memory after the allgather
            # below would see garbage counters, or have its first post zeroed when it runs.
            rt.deviceSynchronize()
            self.host_base = rt.hostAlloc(host.size, _HOST_ALLOC_FLAGS)
            ctypes.memset(self.host_base, 0, host.size)
            mine = (rt.ipcGetMemHandle(self.device_base) if local_comm.size > 1 else b"", routes.gpu,
                    {k: v[1:3] for k, v in self.recv_at.items() if v[0] == "dev"},
                    {k: v[1] for k, v in self.send_at.items() if v[0] == "dev"})
        except Exception as e:
            mine = f"{type(e).__name__}: {e}"
        everyone = local_comm.allgather(mine)
        self._raise_failed(everyone, "cannot set up the device executor's memory on local ranks ")
        self.progress = self.device_base + progress_at
        self.abort = view(self.host_base + abort_at, 1, np.int32)
        me = local_comm.rank
        peer_base: Dict[int, int] = {}
        error = None
        try:
            for peer in sorted({c.peer for c in t.recvs + t.sends if c.peer in local_of}):
                lp = local_of[peer]
                if lp != me:
                    peer_base[lp] = rt.ipcOpenMemHandle(everyone[lp][0])
                    self._opened.append(peer_base[lp])
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        self._raise_failed(local_comm.allgather(error), "cannot map peers' device executor memory (CUDA IPC) on "
                                                        "local ranks ")
        slots, tails, heads = [], [], []
        self.edges: List[Tuple] = []  # (peer, channel, sending, ring, tail, head, conn row)
        for c in t.recvs:
            where, ring_at, tail_at, head_at = self.recv_at[(c.peer, c.channel)]
            if where == "dev":
                lp = local_of[c.peer]
                slots.append(self.device_base + ring_at)
                tails.append(self.device_base + tail_at)
                heads.append(peer_base[lp] + everyone[lp][3][(t.rank, c.channel)])
            else:
                slots.append(self.host_base + ring_at)
                tails.append(self.host_base + tail_at)
                heads.append(self.host_base + head_at)
                self.edges.append((c.peer, c.channel, False, slots[-1], tails[-1], heads[-1], len(slots) - 1))
        for c in t.sends:
            where, head_at, ring_at, tail_at = self.send_at[(c.peer, c.channel)]
            if where == "dev":
                lp = local_of[c.peer]
                ring_off, tail_off = everyone[lp][2][(t.rank, c.channel)]
                slots.append(peer_base[lp] + ring_off)
                tails.append(peer_base[lp] + tail_off)
                heads.append(self.device_base + head_at)
            else:
                slots.append(self.host_base + ring_at)
                tails.append(self.host_base + tail_at)
                heads.append(self.host_base + head_at)
                self.edges.append((c.peer, c.channel, True, slots[-1], tails[-1], heads[-1], len(slots) - 1))
        self.counts = [[n * itemsize for n in row] for row in enc.transfer_elems()]
        self.conns = enc.conns(slots, tails, heads)
        self.launch = LaunchArrays(cupy, enc, self.conns)
        self.calls = 0

    def _raise_failed(self, answers, what: str) -> None:
        failed = {p: m for p, m in enumerate(answers) if isinstance(m, str)}
        if failed:
            self.close()
            raise BackendError(what + "; ".join(f"{p}: {m}" for p, m in sorted(failed.items())))

    def stuck(self, stream) -> str:
        """What this rank's blocks of the last call were left waiting for, read from the counters
        they wait on, all in this rank's memory: the progress of its blocks, the tails of its
        receive connections and the heads of its send connections (:mod:`..stuck_blocks`)."""
        enc, nrecv = self.encoded, self.encoded.nrecv
        out = np.empty(enc.nblocks + len(self.conns), np.int64)
        # cudaMemcpyDefault (4): device memory and mapped host memory alike, under UVA.
        self.rt.memcpyAsync(out.ctypes.data, self.progress, 8 * enc.nblocks, 4, stream.ptr)
        for row in range(len(self.conns)):
            counter = abi.CONN_TAIL if row < nrecv else abi.CONN_HEAD
            self.rt.memcpyAsync(out.ctypes.data + 8 * (enc.nblocks + row), int(self.conns[row, counter]), 8, 4,
                                stream.ptr)
        stream.synchronize()
        progress, counters = out[:enc.nblocks], out[enc.nblocks:]
        never = np.iinfo(np.int64).max  # a counter no block of this rank waits for
        tails = np.where(np.arange(len(counters)) < nrecv, counters, never)
        heads = np.where(np.arange(len(counters)) >= nrecv, counters, never)
        return describe(stuck_blocks(enc, self.calls, progress, tails, heads))

    def edges_of_call(self) -> List[Edge]:
        """The network edges of the next call, for the proxy."""
        enc = self.encoded
        return [Edge(peer=peer, channel=channel, sending=sending, ring=ring, tail=tail, head=head,
                     base=self.calls * int(enc.transfers[row]), counts=self.counts[row], window=enc.window,
                     slot_bytes=self.slot_bytes) for peer, channel, sending, ring, tail, head, row in self.edges]

    def unmap(self) -> None:
        """Unmap the peers' memory (this rank's launches have ended)."""
        for p in self._opened:
            quietly(self.rt.ipcCloseMemHandle, p)
        self._opened = []

    def free(self) -> None:
        """Free this rank's memory: only once no peer writes into it or maps it any more."""
        rt = self.rt
        if self.device_base:
            quietly(rt.free, self.device_base)
        if self.host_base:
            quietly(rt.freeHost, self.host_base)
        self.device_base, self.host_base = 0, 0

    def close(self) -> None:
        """Unmap and free at once: for memory no peer mapped (a set-up that failed)."""
        self.unmap()
        self.free()


class LaunchArrays:
    """A launch's tables, connection rows and per-block buffer offsets in device memory,
    uploaded once per call shape: a call then passes only its buffer and call number."""

    def __init__(self, cupy, enc: abi.EncodedTables, conns: np.ndarray, block_offsets=None):
        def upload(a: np.ndarray):
            return cupy.asarray(a.reshape(-1) if a.size else np.zeros(1, np.int64))

        self.encoded = enc
        self.steps, self.inputs, self.waits = upload(enc.steps), upload(enc.inputs), upload(enc.waits)
        self.block_start, self.conns = upload(enc.block_start), upload(conns)
        offsets = np.zeros(enc.nblocks, np.int64) if block_offsets is None else np.asarray(block_offsets, np.int64)
        self.block_offsets = upload(offsets)

    def launch(self, kernel, buf, progress: int, abort: int, call: int) -> None:
        """One launch of every block; block b works on ``buf`` from its element offset on."""
        enc = self.encoded
        kernel((enc.nblocks,), (THREADS,),
               (buf, self.block_offsets, self.steps, self.inputs, self.waits, self.block_start, self.conns,
                np.uint64(progress), np.uint64(abort), np.int64(call), np.int64(enc.window),
                np.int64(enc.slot_elems)), enable_cooperative_groups=True)


def empty_tables(nblocks: int, window: int, slot_elems: int) -> abi.EncodedTables:
    """Tables of ``nblocks`` blocks without steps: a launch of them returns at once (the probe)."""
    return abi.EncodedTables(steps=np.zeros((0, abi.STEP_FIELDS), np.int64), inputs=np.zeros((0, 2), np.int64),
                             waits=np.zeros((0, 2), np.int64), block_start=np.zeros(nblocks + 1, np.int64),
                             transfers=np.zeros(0, np.int64), nrecv=0, window=window, slot_elems=slot_elems)


def interpreter_name(dtype: Optional[str], op, itemsize: int) -> str:
    """The kernel instantiation for a call: the dtype and op of a reduction; for calls that only
    move bytes, a type of the element's width (copies move bits, whatever the dtype)."""
    if op is None:
        if itemsize not in kernels.COPY_TYPES:
            raise BackendError(f"the device executor moves elements of {sorted(kernels.COPY_TYPES)} bytes, not "
                               f"{itemsize}; set BLINKFLOW_ALGORITHM=runner")
        return kernels.interpreter_name(kernels.COPY_TYPES[itemsize], None)
    return kernels.interpreter_name(dtype, op)


class DeviceExecutor:
    """Runs call shapes' tables with one launch each (see the module)."""

    def __init__(self, cupy, comm, local_comm, layout, routes, timeout: float = CALL_TIMEOUT_S):
        self.cupy = cupy
        self.layout = layout
        self.local_comm = local_comm
        self.routes = routes
        self.timeout = timeout
        self.local_of = {r: layout.local_rank_of[r] for r in layout.local_ranks}
        self.proxy = Proxy(comm)
        self._shapes: "collections.OrderedDict[tuple, ShapeMemory]" = collections.OrderedDict()
        self._sharers = _ranks_on_this_gpu(local_comm, routes.gpu)
        self._broken: Optional[str] = None
        self._resident: Dict[tuple, Optional[str]] = {}
        """(call shape, kernel) -> None where every rank's grid is co-resident, else why not:
        probed and agreed once per pair (a launch and a collective), not per call."""
        self.launches = 0
        """Calls run so far (tests, debugging)."""

    def prepare(self, key: tuple, tables: RankTables, buf, dtype: Optional[str], op):
        """The call shape's memory and kernel, made once (collectively with the host's ranks);
        raises :class:`NotCoResident` on every rank where any rank's grid cannot be resident."""
        if self._broken is not None:
            raise BackendError(f"the device executor stopped after an earlier failure ({self._broken}); "
                               "the job cannot continue its collectives")
        shape = self._shapes.get(key)
        if shape is None:
            # Every local rank runs the same shapes in the same order, so all drop the same one:
            # each unmaps its peers' part first; making the new shape is collective over the host
            # (after every local rank's earlier launches ended and it unmapped), so then no peer
            # writes into or maps the old shape's memory, and it can go.
            old = self._shapes.popitem(last=False)[1] if len(self._shapes) >= SHAPES_KEPT else None
            if old is not None:
                old.unmap()
            try:
                shape = self._shapes[key] = ShapeMemory(tables, buf.dtype.itemsize, self.local_of, self.local_comm,
                                                        self.routes, self.cupy)
            finally:
                if old is not None:
                    old.free()
        else:
            self._shapes.move_to_end(key)
        name = interpreter_name(dtype, op, buf.dtype.itemsize)
        kernel = kernels.get_kernel("interpreter.cu", name)
        if (key, name) not in self._resident:
            self._resident[(key, name)] = self._probe(shape, kernel, buf)
        why = self._resident[(key, name)]
        if why is not None:
            raise NotCoResident(why)
        return shape, kernel

    def _probe(self, shape: ShapeMemory, kernel, buf) -> Optional[str]:
        """Whether every rank's grid of this shape can be resident at once: the occupancy bound
        for the ranks sharing a GPU, then a cooperative launch of the grid with empty tables,
        which CUDA refuses when the blocks cannot all be resident now (other kernels, MPS
        limits). Agreed by the whole job: None where all fit, else every failing rank's reason."""
        enc = shape.encoded
        error = None
        try:
            check_co_residency(self.cupy, kernel, enc.nblocks, self._sharers)
            empty = LaunchArrays(self.cupy, empty_tables(enc.nblocks, enc.window, enc.slot_elems),
                                 np.zeros((1, abi.CONN_FIELDS), np.int64))
            empty.launch(kernel, buf, shape.progress, shape.abort.__array_interface__["data"][0], shape.calls)
            self.cupy.cuda.get_current_stream().synchronize()
        except Exception as e:  # noqa: BLE001 - reported to every rank below
            error = f"{type(e).__name__}: {e}"
        answers = self.proxy.comm.allgather(error)
        failed = {r: m for r, m in enumerate(answers) if m is not None}
        if not failed:
            return None
        return (f"the device executor's blocks cannot all be resident at once (a cooperative launch needs every "
                f"block on an SM), on rank(s) " + "; ".join(f"{r}: {m}" for r, m in sorted(failed.items())) +
                ". Free the GPU of other work, give each rank its own GPU, or set BLINKFLOW_ALGORITHM=runner")

    def run(self, key: tuple, tables: RankTables, buf, dtype: Optional[str], op) -> None:
        """One call of ``tables`` on ``buf`` (a contiguous cupy array on this rank's GPU)."""
        shape, kernel = self.prepare(key, tables, buf, dtype, op)
        call = self.proxy.start(shape.edges_of_call(), shape.abort, self.timeout)
        try:
            shape.launch.launch(kernel, buf, shape.progress, shape.abort.__array_interface__["data"][0], shape.calls)
            call.issued.set()   # the proxy may post the call's transfers now
            # The one event: the launch's end (an aborted launch ends too: the proxy raises the
            # flag past the deadline, and every block returns).
            self.cupy.cuda.get_current_stream().record().synchronize()
        except Exception as e:
            # No block of this rank ran the call: end the proxy's part of it (it posted nothing if
            # the launch itself failed; its error is this one's echo), then lower the flag, so the
            # next call starts clean.
            shape.abort[0] = 1
            try:
                self.proxy.finish(call)
            except BackendError:
                pass
            shape.abort[0] = 0
            raise BackendError(f"the device executor's launch failed on rank {self.layout.rank}: "
                               f"{type(e).__name__}: {e}") from e
        try:
            self.proxy.finish(call)
        except BackendError as e:
            self._broken = str(e)
            where = shape.stuck(self.cupy.cuda.get_current_stream())
            raise BackendError(f"{e}; on rank {self.layout.rank}: {where}") from None
        shape.calls += 1
        self.launches += 1

    def unmap_peers(self) -> None:
        """First step of closing: stop the proxy and unmap every local peer's memory (this rank's
        launches have ended)."""
        self.proxy.close()
        for shape in self._shapes.values():
            shape.unmap()

    def free(self) -> None:
        """Second step: free this rank's memory, once every local peer unmapped it (a barrier of
        the host after :meth:`unmap_peers` on every rank)."""
        for shape in self._shapes.values():
            shape.free()
        self._shapes.clear()


def check_co_residency(cupy, kernel, nblocks: int, sharers: int) -> None:
    """Raise a BackendError unless ``nblocks`` blocks of ``kernel`` from each of the ``sharers``
    ranks on this GPU can be resident at once: the blocks wait for each other (and for peers'
    blocks), so one that never gets an SM would hang them all."""
    device = cupy.cuda.runtime.getDevice()
    sms = int(cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])
    from cupy.cuda import driver

    per_sm = int(driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, THREADS, 0))
    if nblocks * sharers > sms * per_sm:
        raise BackendError(f"the device executor needs {nblocks} co-resident blocks per rank x {sharers} rank(s) on "
                           f"GPU {device}, which holds {sms} SMs x {per_sm} blocks; give each rank its own GPU, plan "
                           "fewer trees, or set BLINKFLOW_ALGORITHM=runner")


def _ranks_on_this_gpu(local_comm, gpu: str) -> int:
    return sum(1 for g in local_comm.allgather(gpu) if g == gpu)
