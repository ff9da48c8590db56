"""The device executor's loopback mode: one process runs every virtual rank of a schedule in one
launch of ``kernels/interpreter.cu`` on one GPU, with every ring and counter in that GPU's memory.
A measuring tool (``bench gpu --loopback``, tests/gpu/loopback_script.py), not a data path: no
job's collective runs it, so it lives with the benchmarks.

It is how the kernel and its protocol are measured on the single GPU this project is lent: the
same tables (:mod:`blinkflow.schedule.device_tables`), launch arrays
(:func:`blinkflow.backends.device_abi.loopback`) and kernel as the multi-process executor, but
a connection's ring, ``tail`` and ``head`` all live in one ``cudaMalloc`` and no IPC, proxy or
MPI is involved. Virtual rank ``r``'s buffer is row ``r`` of one ``[nranks, nelems]`` array.

The host does per call what the multi-process executor does: one launch and one event; a
watchdog thread raises the abort flag (pinned, mapped host memory) if the launch is not done
by its deadline, every block returns, and the call raises a :class:`BackendError` that names
the blocks left waiting and the counter each waited for (:mod:`..stuck_blocks`, read from the
counters the aborted launch left in device memory).
"""
from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..backends import device_abi as abi
from ..backends.cuda import kernels
from ..backends.cuda.device_executor import CALL_TIMEOUT_S, LaunchArrays, check_co_residency, interpreter_name
from ..backends.host_memory import view
from ..backends.stuck_blocks import conn_counters, describe, stuck_blocks
from ..backends.teardown import quietly
from ..errors import BackendError
from ..schedule import policy
from ..schedule.device_tables import RankTables, all_tables
from ..schedule.ir import Schedule

_HOST_ALLOC_FLAGS = 0x1 | 0x2  # cudaHostAllocPortable | cudaHostAllocMapped


def loopback_tables(schedule: Schedule, window: int = policy.DEVICE_WINDOW, fuse_inputs: int = kernels.MAX_INPUTS - 1
                    ) -> List[RankTables]:
    """Every rank's tables of ``schedule`` (its devices are virtual ranks 0.. in order), fused as
    the cuda backend fuses (its reduce kernel's inputs less the local value)."""
    rank_of = {d: r for r, d in enumerate(schedule.devices)}
    tables = all_tables(schedule, rank_of, window, fuse_inputs)
    return [tables[r] for r in range(len(schedule.devices))]


class Watchdog:
    """A thread that raises an abort flag when an armed deadline passes before :meth:`disarm`."""

    def __init__(self):
        self._cv = threading.Condition()
        self._armed: Optional[tuple] = None
        self._closed = False
        self.fired = False
        self._thread = threading.Thread(target=self._main, name="blinkflow-loopback-watchdog", daemon=True)
        self._thread.start()

    def arm(self, flag: np.ndarray, seconds: float) -> None:
        with self._cv:
            self.fired = False
            self._armed = (flag, time.monotonic() + seconds)
            self._cv.notify()

    def disarm(self) -> bool:
        """Stop watching; True if the deadline had passed (the flag was raised)."""
        with self._cv:
            self._armed = None
            return self.fired

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=5)

    def _main(self) -> None:
        with self._cv:
            while not self._closed:
                if self._armed is None:
                    self._cv.wait()
                    continue
                flag, deadline = self._armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                flag[0] = 1
                self.fired = True
                self._armed = None


class LoopbackExecutor:
    """One call shape's loopback launch: every virtual rank's blocks of ``tables`` (index = rank)
    on elements of ``dtype`` (a numpy dtype name; ``"bfloat16"`` for bfloat16 bits in uint16)."""

    def __init__(self, cupy, tables: Sequence[RankTables], dtype: str, op, timeout: float = CALL_TIMEOUT_S):
        self.cupy = cupy
        self.rt = rt = cupy.cuda.runtime
        self.dtype, self.op, self.timeout = dtype, op, timeout
        self.itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        self.layout = layout = abi.loopback(tables, self.itemsize)
        self.kernel = kernels.get_kernel("interpreter.cu", interpreter_name(dtype, op, self.itemsize))
        check_co_residency(cupy, self.kernel, layout.encoded.nblocks, 1)
        self.base = self.host = 0
        try:
            self.base = rt.malloc(layout.nbytes)
            rt.memset(self.base, 0, layout.nbytes)
            self.host = rt.hostAlloc(8, _HOST_ALLOC_FLAGS)
        except Exception:
            self.close()
            raise
        self.abort = view(self.host, 1, np.int32)
        self.abort[0] = 0
        self.arrays = LaunchArrays(cupy, layout.encoded, layout.conns(self.base), layout.block_offsets)
        self.watchdog = Watchdog()
        self.calls = 0
        self._waited = 0  # calls issued before the last wait began
        self._broken: Optional[str] = None

    @property
    def nblocks(self) -> int:
        return self.layout.encoded.nblocks

    def launch(self, bufs) -> None:
        """Issue one call on ``bufs`` (a contiguous ``[nranks, nelems]`` cupy array) on the current
        stream, without waiting: what the host does per collective."""
        if self._broken is not None:
            raise BackendError(f"the loopback executor stopped after an earlier failure ({self._broken})")
        want = (self.layout.nranks, self.layout.nelems)
        if tuple(bufs.shape) != want or not bufs.flags.c_contiguous or bufs.dtype.itemsize != self.itemsize:
            raise BackendError(f"a loopback call runs on a contiguous {list(want)} array of {self.itemsize}-byte "
                               f"elements, got {list(bufs.shape)} of {bufs.dtype}")
        self.arrays.launch(self.kernel, bufs, self.base + self.layout.progress_offset, self.host, self.calls)
        self.calls += 1

    def wait(self) -> None:
        """Wait for the calls issued so far, aborting them past the deadline."""
        first, self._waited = self._waited, self.calls
        self.watchdog.arm(self.abort, self.timeout)
        try:
            self.cupy.cuda.get_current_stream().record().synchronize()
        finally:
            fired = self.watchdog.disarm()
        if fired:
            self._broken = f"a launch was not done within {self.timeout:g} s"
            raise BackendError(f"the loopback executor's launch was not done within {self.timeout:g} s and was "
                               f"aborted: {self.stuck(first)}")

    def stuck(self, first_call: int = 0) -> str:
        """What the counters in device memory say about the calls from ``first_call`` on: the
        blocks of the first call that left any waiting, and what each waited for."""
        memory = np.empty(self.layout.nbytes, np.uint8)
        stream = self.cupy.cuda.get_current_stream()
        self.rt.memcpyAsync(memory.ctypes.data, self.base, self.layout.nbytes, 2, stream.ptr)  # device to host
        stream.synchronize()
        lay, enc = self.layout, self.layout.encoded
        progress = memory[lay.progress_offset:lay.progress_offset + 8 * enc.nblocks].view(np.int64)
        tails, heads = conn_counters(memory, lay.conn_offsets, 1), conn_counters(memory, lay.conn_offsets, 2)
        ranks = (lay.block_offsets // max(1, lay.nelems)).tolist()
        for call in range(first_call, max(first_call + 1, self.calls)):
            stuck = stuck_blocks(enc, call, progress, tails, heads, ranks)
            if stuck:
                return f"call {call}: {describe(stuck)}"
        return describe([])

    def run(self, bufs) -> None:
        """One call: launch and wait."""
        self.launch(bufs)
        self.wait()

    def close(self) -> None:
        watchdog = getattr(self, "watchdog", None)
        if watchdog is not None:
            watchdog.close()
        if self.base:
            quietly(self.rt.free, self.base)
        if self.host:
            quietly(self.rt.freeHost, self.host)
        self.base = self.host = 0


def schedule_bytes(tables: Sequence[RankTables], itemsize: int) -> Dict[str, int]:
    """The bytes a call of ``tables`` moves through device memory (every virtual rank on one
    GPU), by what each step reads and writes: a receive reads its slots and writes the range
    (read too when it combines), a send writes the peer's slot, a copy reads and writes the
    range. Over the measured device-copy bandwidth it is the call's HBM roofline."""
    read = written = 0
    for t in tables:
        for block in t.blocks:
            for s in block.steps:
                n = s.count * itemsize
                if s.recvs:
                    read += n * len(s.recvs) + (n if s.op in ("recv_reduce", "recv_reduce_send") else 0)
                    written += n
                elif s.op == "copy":
                    read += n
                    written += n
                elif s.send_conn >= 0:
                    read += n
                if s.send_conn >= 0:
                    written += n
    return {"read": read, "written": written}
