"""A numpy emulator of the device executor's table interpreter: one thread per (rank, block).

:func:`interpret_block` is what one thread block of ``kernels/interpreter.cu`` does, line for
line, on the same launch arrays (:mod:`.device_abi`) and the same raw addresses: slots and
counters may live anywhere a pointer reaches (numpy arrays here; shared memory between processes
under the fake CuPy, whose interpreter "kernel" runs this function per block). Per step, all
waits before any work:

1. ``progress[b] >= c * stride + v`` for each wait (cross-block dependencies);
2. each receive waits ``tail >= base + seq + 1`` (``base = c * transfers``, call ``c``);
3. a send waits ``head >= base + send_seq + 1 - window`` (the slot was consumed);
4. the work: a receive copies slot ``(base + seq) % window`` of its connection into the range; a
   reduction combines its slots in (``buffer (op) slot_1 (op) slot_2 ...``, the runner's fused
   kernel's order and rounding: :func:`combiner`); ``copy`` moves a range; a send then writes
   the range into the receiver's slot;
5. the posts: the senders' ``head`` (the slots are free again), the receiver's ``tail`` (the
   data is there), the block's ``progress``.

Slot data is written before its ``tail`` is raised (program order of one thread, which x86
keeps for other processes too; the kernel puts a system-scope fence there). Every wait polls the
abort flag (an int32): whoever raises it (a watchdog past its deadline, the host on a stall)
ends every block; :func:`interpret_block` then returns what the block was waiting for.

:func:`run_emulated` runs every rank of one call in one process, with slots and counters in
numpy arrays the threads share (the unit tests compare it bitwise with the host runner).

No production module imports this one (``tests/unit/test_layering.py`` checks it); it ships in
the package because ``python -m blinkflow.bench gpu --loopback`` (:mod:`blinkflow.bench.gpu_loopback`)
compares the real kernel with it on the lent GPU, and the fake CuPy of the tests runs it as its
interpreter "kernel". The raw-address helpers both share live in :mod:`.host_memory`.
"""
from __future__ import annotations

import threading
import time
from typing import List, Optional, Sequence

import numpy as np

from ..errors import BackendError
from ..schedule.device_tables import RankTables
from . import device_abi as abi
from .device_abi import EncodedTables
from .host_memory import address, view


def combiner(dtype, ufunc):
    """``combine(span, slots)``: ``span = span (op) slots[0] (op) slots[1] ...`` in place, as the
    kernel computes it: in the arithmetic type of ``dtype`` (float for float16 and bfloat16,
    rounded once at the end; the type itself otherwise, where rounding after each input is the
    same thing)."""
    dtype = np.dtype(dtype)
    if (dtype.kind == "f" and dtype.itemsize == 2) or dtype.name == "bfloat16":
        def combine(span, slots):
            acc = span.astype(np.float32)
            for x in slots:
                ufunc(acc, x.astype(np.float32), out=acc)
            span[...] = acc.astype(dtype)
        return combine

    def combine(span, slots):
        for x in slots:
            ufunc(span, x, out=span)
    return combine


def interpret_block(enc: EncodedTables, b: int, buf: np.ndarray, conns: np.ndarray, progress: np.ndarray,
                    abort: np.ndarray, call: int, ufunc) -> Optional[str]:
    """Run block ``b``'s steps of call ``call`` on ``buf`` (the block's buffer); ``conns`` holds the
    connections' addresses (:mod:`.device_abi`), ``progress`` the launch's per-block counters,
    ``abort`` the flag. Returns None when the block finished, else what it waited for when the
    flag stopped it."""
    window, slot_elems, dtype = enc.window, enc.slot_elems, buf.dtype
    stride = enc.progress_stride
    combine = combiner(dtype, ufunc)
    counters = {}

    def counter(addr: int) -> np.ndarray:
        c = counters.get(addr)
        if c is None:
            c = counters[addr] = view(addr, 1, np.int64)
        return c

    def wait(c: np.ndarray, value: int) -> bool:
        spins = 0
        while c[0] < value:
            if abort[0]:
                return False
            spins += 1
            time.sleep(0 if spins < 64 else 1e-4)
        return True

    def slot(row: int, seq: int, count: int) -> np.ndarray:
        start = int(conns[row, abi.CONN_SLOTS]) + (seq % window) * slot_elems * dtype.itemsize
        return view(start, count, dtype)

    first = int(enc.block_start[b])
    for i in range(first, int(enc.block_start[b + 1])):
        (op, offset, count, src, rstart, rcount, send_row, send_seq, wstart, wcount,
         posts) = (int(x) for x in enc.steps[i])
        for w in range(wstart, wstart + wcount):
            other, value = int(enc.waits[w, 0]), int(enc.waits[w, 1])
            if not wait(progress[other:other + 1], call * stride + value):
                return f"block {other}'s progress {value}"
        received = []  # (conns row, sequence number) of each input
        for row, seq in enc.inputs[rstart:rstart + rcount]:
            row = int(row)
            rseq = call * int(conns[row, abi.CONN_TRANSFERS]) + int(seq)
            if not wait(counter(int(conns[row, abi.CONN_TAIL])), rseq + 1):
                return f"transfer #{rseq} on connection row {row}"
            received.append((row, rseq))
        if send_row >= 0:
            sseq = call * int(conns[send_row, abi.CONN_TRANSFERS]) + send_seq
            if not wait(counter(int(conns[send_row, abi.CONN_HEAD])), sseq + 1 - window):
                return f"a free slot for transfer #{sseq} on connection row {send_row}"
        span = buf[offset:offset + count]
        if received:
            incoming = [slot(row, rseq, count) for row, rseq in received]
            if op in (abi.OP_CODES["recv"], abi.OP_CODES["recv_send"]):
                span[...] = incoming[0]
            else:
                combine(span, incoming)
        elif op == abi.OP_CODES["copy"]:
            span[...] = buf[src:src + count]
        if send_row >= 0:
            slot(send_row, sseq, count)[...] = span
        for row, rseq in received:  # the slots are free again: the senders' heads
            counter(int(conns[row, abi.CONN_HEAD]))[0] = rseq + 1
        if send_row >= 0:  # the data is there: the receiver's tail
            counter(int(conns[send_row, abi.CONN_TAIL]))[0] = sseq + 1
        if posts:
            progress[b] = call * stride + (i - first) + 1
    return None


def run_blocks(enc: EncodedTables, bufs: Sequence[np.ndarray], conns: np.ndarray, progress: np.ndarray,
               abort: np.ndarray, call: int, ufunc) -> List[str]:
    """Every block of one launch, one thread each (the blocks of a launch are co-resident), block
    ``b`` on ``bufs[b]``; returns what aborted blocks waited for (empty when the launch completed)."""
    stuck: List[str] = []

    def block(b: int) -> None:
        try:
            why = interpret_block(enc, b, bufs[b], conns, progress, abort, call, ufunc)
        except BaseException as e:  # noqa: BLE001 - a broken block stops the others, as a trap would
            abort[0] = 1
            why = f"an error: {e!r}"
        if why is not None:
            stuck.append(f"block {b} waited for {why}")

    threads = [threading.Thread(target=block, args=(b,), daemon=True) for b in range(enc.nblocks)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return stuck


class RankMemory:
    """One emulated rank's memory for the tables ``t``: receive rings and tails, heads of its
    sends, per-block progress; ``calls`` so far."""

    def __init__(self, t: RankTables, dtype):
        self.tables = t
        self.encoded = abi.encode(t)
        nbytes = self.encoded.window * self.encoded.slot_elems * np.dtype(dtype).itemsize
        self.rings = [np.zeros(nbytes, np.uint8) for _ in t.recvs]
        self.tail = np.zeros(len(t.recvs), np.int64)
        self.head = np.zeros(len(t.sends), np.int64)
        self.progress = np.zeros(len(t.blocks), np.int64)
        self.calls = 0


def run_emulated(tables: Sequence[RankTables], bufs: Sequence[np.ndarray], ufunc,
                 memory: Optional[List[RankMemory]] = None, timeout: float = 30.0) -> List[RankMemory]:
    """Run one call of every rank's ``tables`` on ``bufs`` (index = rank) in place, every block
    of every rank a thread; return the memories (pass them back in to run the next call with
    counters continuing). A call that outlasts ``timeout`` raises the abort flag and a
    :class:`BackendError`."""
    if memory is None:
        memory = [RankMemory(t, b.dtype) for t, b in zip(tables, bufs)]
    conns = []
    for m in memory:
        t = m.tables
        rows_slots, rows_tail, rows_head = [], [], []
        for i, c in enumerate(t.recvs):  # my ring and tail; the sender's head
            sender = memory[c.peer]
            j = [(x.peer, x.channel) for x in sender.tables.sends].index((t.rank, c.channel))
            rows_slots.append(address(m.rings[i]))
            rows_tail.append(address(m.tail) + 8 * i)
            rows_head.append(address(sender.head) + 8 * j)
        for j, c in enumerate(t.sends):  # the receiver's ring and tail; my head
            receiver = memory[c.peer]
            i = [(x.peer, x.channel) for x in receiver.tables.recvs].index((t.rank, c.channel))
            rows_slots.append(address(receiver.rings[i]))
            rows_tail.append(address(receiver.tail) + 8 * i)
            rows_head.append(address(m.head) + 8 * j)
        conns.append(m.encoded.conns(rows_slots, rows_tail, rows_head))
    abort = np.zeros(1, np.int32)
    stuck: List[str] = []
    ranks = [threading.Thread(target=lambda r=r, m=m: stuck.extend(
        f"rank {m.tables.rank} {s}" for s in run_blocks(m.encoded, [bufs[r]] * m.encoded.nblocks, conns[r], m.progress,
                                                        abort, m.calls, ufunc)),
        daemon=True) for r, m in enumerate(memory)]
    for th in ranks:
        th.start()
    deadline = time.monotonic() + timeout
    for th in ranks:
        th.join(max(0.0, deadline - time.monotonic()))
        if th.is_alive():
            abort[0] = 1
            th.join()
    if abort[0]:
        raise BackendError(f"device emulator: the call was not done within {timeout} s; every block aborts ("
                           + "; ".join(sorted(stuck)[:8]) + ")")
    for m in memory:
        m.calls += 1
    return memory


class EmulatedLoopback:
    """The loopback mode emulated: one launch of every virtual rank's blocks of ``tables``
    (:func:`.device_abi.loopback`), rings and counters in one numpy block as the device keeps
    them in one allocation; :meth:`run` runs a call on the rows of a ``[nranks, nelems]`` array."""

    def __init__(self, tables: Sequence[RankTables], dtype):
        self.launch = abi.loopback(tables, np.dtype(dtype).itemsize)
        self.memory = np.zeros(self.launch.nbytes, np.uint8)
        base = address(self.memory)
        self.conns = self.launch.conns(base)
        self.progress = view(base + self.launch.progress_offset, self.launch.encoded.nblocks, np.int64)
        self.calls = 0

    def run(self, bufs: np.ndarray, ufunc, timeout: float = 30.0) -> None:
        launch = self.launch
        if bufs.shape != (launch.nranks, launch.nelems) or not bufs.flags.c_contiguous:
            raise BackendError(f"a loopback call runs on a contiguous [{launch.nranks}, {launch.nelems}] array, "
                               f"got {bufs.shape}")
        flat = bufs.reshape(-1)
        abort = np.zeros(1, np.int32)
        stuck: List[str] = []
        runner = threading.Thread(target=lambda: stuck.extend(run_blocks(
            launch.encoded, [flat[int(o):] for o in launch.block_offsets], self.conns, self.progress, abort,
            self.calls, ufunc)), daemon=True)
        runner.start()
        runner.join(timeout)
        if runner.is_alive():
            abort[0] = 1
            runner.join()
        if abort[0]:
            raise BackendError(f"device emulator (loopback): the call was not done within {timeout} s; every block "
                               "aborts (" + "; ".join(sorted(stuck)[:8]) + ")")
        self.calls += 1
