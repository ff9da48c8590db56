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
from ..device_emulator import view
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
            self.host_base = rt.hostAlloc(host.size, _HOST_ALLOC_FLAGS)
            ctypes.memset(self.host_base, 0, host.size)
            mine = (rt.ipcGetMemHandle(self.device_base) if local_comm.size > 1 else b"", routes.bus_id,
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

    def edges_of_call(self) -> List[Edge]:
        """The network edges of the next call, for the proxy."""
        enc = self.encoded
        return [Edge(peer=peer, channel=channel, sending=sending, ring=ring, tail=tail, head=head,
                     base=self.calls * int(enc.transfers[row]), counts=self.counts[row], window=enc.window,
                     slot_bytes=self.slot_bytes) for peer, channel, sending, ring, tail, head, row in self.edges]

    def close(self) -> None:
        rt = self.rt
        for p in self._opened:
            quietly(rt.ipcCloseMemHandle, p)
        if self.device_base:
            quietly(rt.free, self.device_base)
        if self.host_base:
            quietly(rt.freeHost, self.host_base)
        self._opened, self.device_base, self.host_base = [], 0, 0


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
                np.int64(enc.slot_elems)))


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
        self._sharers = _ranks_on_this_gpu(local_comm, routes.bus_id)
        self._broken: Optional[str] = None
        self._resident: set = set()
        """(kernel, blocks) pairs that passed the co-residency check: it asks the device's
        properties, which costs more than the launch, so once per pair, not per call."""
        self.launches = 0
        """Calls run so far (tests, debugging)."""

    def run(self, key: tuple, tables: RankTables, buf, dtype: Optional[str], op) -> None:
        """One call of ``tables`` on ``buf`` (a contiguous cupy array on this rank's GPU)."""
        if self._broken is not None:
            raise BackendError(f"the device executor stopped after an earlier failure ({self._broken}); "
                               "the job cannot continue its collectives")
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = ShapeMemory(tables, buf.dtype.itemsize, self.local_of, self.local_comm,
                                                    self.routes, self.cupy)
            # Making it was collective over the host after every local rank's earlier launches
            # ended, so no peer still writes into an old shape's memory; every local rank runs
            # the same shapes in the same order, so all free the same one.
            if len(self._shapes) > SHAPES_KEPT:
                self._shapes.popitem(last=False)[1].close()
        else:
            self._shapes.move_to_end(key)
        enc = shape.encoded
        name = interpreter_name(dtype, op, buf.dtype.itemsize)
        kernel = kernels.get_kernel("interpreter.cu", name)
        if (name, enc.nblocks) not in self._resident:
            check_co_residency(self.cupy, kernel, enc.nblocks, self._sharers)
            self._resident.add((name, enc.nblocks))
        launched = self.proxy.start(shape.edges_of_call(), shape.abort, self.timeout)
        try:
            shape.launch.launch(kernel, buf, shape.progress, shape.abort.__array_interface__["data"][0], shape.calls)
            # The one event: the launch's end (an aborted launch ends too: the proxy raises the
            # flag past the deadline, and every block returns).
            self.cupy.cuda.get_current_stream().record().synchronize()
        except Exception:
            shape.abort[0] = 1
            launched.set()
            raise
        try:
            self.proxy.finish(launched)
        except BackendError as e:
            self._broken = str(e)
            raise
        shape.calls += 1
        self.launches += 1

    def close(self) -> None:
        self.proxy.close()
        for shape in self._shapes.values():
            shape.close()
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


def _ranks_on_this_gpu(local_comm, bus_id: str) -> int:
    return sum(1 for b in local_comm.allgather(bus_id) if b == bus_id)
