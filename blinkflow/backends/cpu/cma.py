"""Cross-memory attach: move data to and from a peer process's memory in one copy (Linux
``process_vm_readv`` / ``process_vm_writev``).

Without it a rank must first copy its tensors into shared memory so that its peers can read
them: one extra pass over every byte, which on a busy host costs as much as the reduction
itself. With it the reducing rank pulls each peer's slice straight out of the peer's own numpy
arrays, and pushes the reduced slice straight into each peer's result. Open MPI's ``sm`` BTL, MPICH's Nemesis LMT and NCCL's P2P-over-shm make the same trade
for large messages.

The kernel allows the calls when the caller may ptrace the target: same user, and under Yama's
``ptrace_scope=1`` only if the target said so, which :func:`allow_peers` does (as Open MPI does)
before the peers probe each other. Containers whose seccomp policy forbids the call, other
operating systems and ``ptrace_scope>=2`` make :func:`probe` answer False, and the backend copies
through shared memory instead.
"""
from __future__ import annotations

import bisect
import ctypes
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...errors import BackendError

#: Kernel limit on iovecs per call (``IOV_MAX``, 1024 on Linux).
IOV_MAX = 1024
#: Bytes per call at most: the kernel stops at MAX_RW_COUNT (2 GiB - 4 KiB) and returns a short count.
MAX_CALL_BYTES = 1 << 30
_PR_SET_PTRACER = 0x59616D61  # "Yama"
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class PeerMemory:
    """``process_vm_readv`` / ``process_vm_writev`` through ctypes (which releases the GIL during
    the call)."""

    def __init__(self):
        libc = _libc()
        self._calls = {}
        for name in ("process_vm_readv", "process_vm_writev"):
            call = getattr(libc, name)  # AttributeError where the C library lacks it
            call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                             ctypes.c_ulong]
            call.restype = ctypes.c_ssize_t
            self._calls[name] = call
        self._local = np.zeros(2, np.uint64)
        self._local_at = self._local.ctypes.data  # (numpy's .ctypes costs microseconds per use)
        # One (local, remote) pair of iovecs for the moves of one contiguous span, filled with
        # plain ints: a pipeline chunk then costs one C call and no numpy object.
        self._pair = (_IoVec * 2)()
        self._pair_at = ctypes.addressof(self._pair)
        self._remote_at = self._pair_at + ctypes.sizeof(_IoVec)
        self._here, self._there = self._pair[0], self._pair[1]  # views of the pair's memory

    def read(self, pid: int, dst: np.ndarray, runs: np.ndarray) -> None:
        """Fill ``dst`` (C-contiguous) with the bytes of ``runs`` ((address, length) rows, uint64)
        of process ``pid``, in order. Raises BackendError if the kernel refuses or comes up short."""
        self._move("process_vm_readv", pid, dst, runs)

    def write(self, pid: int, src: np.ndarray, runs: np.ndarray) -> None:
        """Copy ``src`` (C-contiguous) into the ``runs`` of process ``pid``, in order."""
        self._move("process_vm_writev", pid, src, runs)

    def read_span(self, pid: int, local: int, nbytes: int, remote: int) -> None:
        """Copy ``nbytes`` (at most MAX_CALL_BYTES) at address ``remote`` of process ``pid`` to
        address ``local`` of this one."""
        self._move_span("process_vm_readv", pid, local, nbytes, remote)

    def write_span(self, pid: int, local: int, nbytes: int, remote: int) -> None:
        """Copy ``nbytes`` (at most MAX_CALL_BYTES) at address ``local`` of this process to
        address ``remote`` of process ``pid``."""
        self._move_span("process_vm_writev", pid, local, nbytes, remote)

    def _move_span(self, name: str, pid: int, local: int, nbytes: int, remote: int) -> None:
        here, there = self._here, self._there
        here.base, here.len, there.base, there.len = local, nbytes, remote, nbytes
        got = self._calls[name](pid, self._pair_at, 1, self._remote_at, 1, 0)
        if got != nbytes:
            self._fail(name, pid, nbytes, got)

    @staticmethod
    def _fail(name: str, pid: int, want: int, got: int) -> None:
        err = ctypes.get_errno()
        how = os.strerror(err) if got < 0 else f"{got} bytes moved"
        raise BackendError(f"{name} of {want} bytes with process {pid} failed ({how}); set "
                           "BLINKFLOW_CPU_SINGLE_COPY=0 to copy through shared memory instead")

    def _move(self, name: str, pid: int, local: np.ndarray, runs: np.ndarray) -> None:
        call = self._calls[name]
        address = local.__array_interface__["data"][0]
        for batch, want in _calls_of(runs):
            self._local[0], self._local[1] = address, want
            got = call(pid, self._local_at, 1, batch.__array_interface__["data"][0], batch.shape[0], 0)
            if got != want:
                self._fail(name, pid, want, got)
            address += want


def _calls_of(runs: np.ndarray):
    """``runs`` cut into the batches of single system calls, with their byte counts: at most
    IOV_MAX runs and MAX_CALL_BYTES bytes each (Linux moves at most ~2 GiB per call and reports a
    short count beyond). The common cases (one run: a chunk of one large tensor; a few runs)
    cost no more than a sum: in a pipeline of megabyte chunks the Python around each call is a
    tenth of its time."""
    if runs.shape[0] <= IOV_MAX:
        total = int(runs[0, 1]) if runs.shape[0] == 1 else int(runs[:, 1].sum())
        if total <= MAX_CALL_BYTES:
            yield np.ascontiguousarray(runs), total
            return
    batch, total = [], 0
    for address, length in runs.tolist():
        while length:
            take = min(length, MAX_CALL_BYTES - total)
            batch.append((address, take))
            total += take
            address += take
            length -= take
            if total == MAX_CALL_BYTES or len(batch) == IOV_MAX:
                yield np.array(batch, np.uint64), total
                batch, total = [], 0
    if batch:
        yield np.array(batch, np.uint64), total


class PieceTable:
    """Where a rank's tensors are: the virtual concatenation of its pieces, as address runs.

    Plain integer lists (the table is rebuilt from a peer's control segment on every call, after a
    large reduction has flushed the caches: numpy objects would cost more than the lookups)."""

    def __init__(self, addresses: Sequence[int], sizes: Sequence[int]):
        self._addresses = list(addresses)  # no empty pieces
        self._sizes = list(sizes)
        self._starts = []
        at = 0
        for n in self._sizes:
            self._starts.append(at)
            at += n

    @staticmethod
    def rows_of(pieces: Sequence[np.ndarray]) -> Tuple[List[int], List[int]]:
        """(addresses, byte sizes) of the non-empty C-contiguous arrays in ``pieces``."""
        addresses, sizes = [], []
        for piece in pieces:
            if piece.nbytes:
                addresses.append(piece.__array_interface__["data"][0])
                sizes.append(piece.nbytes)
        return addresses, sizes

    def span(self, lo: int, hi: int) -> Optional[int]:
        """The address of bytes ``[lo, hi)`` of the concatenation if they lie in one piece (a
        chunk of a large tensor: the common case), else None."""
        first = bisect.bisect_right(self._starts, lo) - 1
        if first >= 0 and (first + 1 == len(self._starts) or hi <= self._starts[first + 1]):
            return self._addresses[first] + lo - self._starts[first]
        return None

    def runs(self, lo: int, hi: int) -> np.ndarray:
        """Address runs ((address, bytes) rows, uint64) of bytes ``[lo, hi)`` of the concatenation."""
        first = bisect.bisect_right(self._starts, lo) - 1
        last = bisect.bisect_left(self._starts, hi)
        out = []
        for i in range(max(first, 0), last):
            begin, end = max(self._starts[i], lo), min(self._starts[i] + self._sizes[i], hi)
            if begin < end:
                out.append((self._addresses[i] + begin - self._starts[i], end - begin))
        return np.array(out, np.uint64).reshape(-1, 2)


_allowed = False
"""Whether :func:`allow_peers` changed this process's ptracer setting (and must undo it)."""


def allow_peers() -> None:
    """Let same-user processes read this one under Yama ``ptrace_scope=1`` (no-op elsewhere)."""
    global _allowed
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "1":
                return
    except OSError:
        return
    try:
        _allowed = _libc().prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0) == 0
    except (AttributeError, OSError):  # pragma: no cover - no prctl: probe() will say no
        pass


def disallow_peers() -> None:
    """Undo :func:`allow_peers` (when single copy is not used, or no longer)."""
    global _allowed
    if _allowed:
        _libc().prctl(_PR_SET_PTRACER, 0, 0, 0, 0)
        _allowed = False


def probe(local_comm) -> Tuple[Optional[PeerMemory], List[int]]:
    """Collective over ``local_comm``: (a reader/writer, every local rank's pid) if every rank can
    read and write every other rank's memory, else (None, pids). The same answer on every local
    rank."""
    from mpi4py import MPI

    allow_peers()
    me, size = local_comm.Get_rank(), local_comm.Get_size()
    token = np.array([int.from_bytes(os.urandom(7), "little")], np.int64)
    landing = np.zeros(size, np.int64)  # peers write their tokens here
    seen = local_comm.allgather((os.getpid(), token.__array_interface__["data"][0],
                                 landing.__array_interface__["data"][0], int(token[0])))
    pids = [pid for pid, _, _, _ in seen]
    memory: Optional[PeerMemory] = None
    ok = True
    try:
        memory = PeerMemory()
        got = np.zeros(1, np.int64)
        for q, (pid, token_at, landing_at, value) in enumerate(seen):
            if q != me:
                memory.read(pid, got, np.array([[token_at, 8]], np.uint64))
                ok = ok and int(got[0]) == value
                memory.write(pid, token, np.array([[landing_at + 8 * me, 8]], np.uint64))
    except (AttributeError, OSError, BackendError):
        ok = False
    ok = local_comm.allreduce(ok, op=MPI.LAND)  # every write has landed (or failed) by now
    ok = ok and all(int(landing[q]) == seen[q][3] for q in range(size) if q != me)
    ok = local_comm.allreduce(ok, op=MPI.LAND)  # keeps every token alive until all have checked
    if not ok:
        disallow_peers()
    return (memory if ok else None), pids
