"""A numpy emulator of the device executor's table interpreter: one thread per (rank, block).

It runs the tables of :mod:`blinkflow.schedule.device_tables` with exactly the protocol written
there (and that the CUDA interpreter kernel is to implement), so the protocol is exercised on
every CI run without a GPU. Per step, all waits before any work:

1. ``progress[b] >= v`` for each wait (cross-block dependencies);
2. a receive waits ``tail[recv_conn] >= base + recv_seq + 1``;
3. a send waits ``head[send_conn] >= base + send_seq + 1 - window``;
4. the work: a receive copies slot ``(base + seq) % window`` of its connection into the range or
   combines it in (``buffer (op) slot``, the runner's order: the local value first); ``copy``
   moves a range; a send then writes the range into the peer's slot;
5. the posts: the receiver's ``head`` (the slot is free again), the sender's ``tail`` (the data is
   there), the block's ``progress``.

Memory layout, per rank (:class:`RankMemory`): the slots of every connection it *receives* on
(``window x slot_elems`` each, written by the sender), ``tail`` counters of those connections
(written by the sender), ``head`` counters of the connections it *sends* on (written by the
receiver), ``progress`` per block. Counters are int64 and monotonic across calls (``base`` is
the transfers of earlier calls), so a late peer never mistakes one call's chunk for another's.
Slot data is written before its ``tail`` is raised; in Python the interpreter lock orders the
two, where the kernel needs a system-scope fence.

This module emulates every rank of one call in one process (slots and counters in numpy arrays
the threads share); a wait that outlasts ``timeout`` raises the abort flag, which every wait loop
polls, so a hung table ends every thread with a :class:`BackendError` instead of hanging.
"""
from __future__ import annotations

import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import BackendError
from ..schedule.device_tables import RankTables


class RankMemory:
    """One rank's device memory for the tables ``t``: its buffer, receive slots and counters."""

    def __init__(self, t: RankTables, buf: np.ndarray):
        self.tables = t
        self.buf = buf
        self.slots = np.zeros((len(t.recvs), t.window, max(1, t.slot_elems)), buf.dtype)
        self.tail = np.zeros(len(t.recvs), np.int64)
        self.head = np.zeros(len(t.sends), np.int64)
        self.progress = np.zeros(len(t.blocks), np.int64)
        self.recv_base = np.zeros(len(t.recvs), np.int64)
        self.send_base = np.zeros(len(t.sends), np.int64)


def run_emulated(tables: Sequence[RankTables], bufs: Sequence[np.ndarray], ufunc,
                 memory: Optional[List[RankMemory]] = None, timeout: float = 30.0) -> List[RankMemory]:
    """Run one call of every rank's ``tables`` on ``bufs`` (index = rank) in place; return the
    memories (pass them back in to run the next call with counters continuing)."""
    if memory is None:
        memory = [RankMemory(t, b) for t, b in zip(tables, bufs)]
    else:
        for m, b in zip(memory, bufs):
            m.buf = b
            m.progress[:] = 0
    # where rank r's send connection i lands: (peer memory, its receive connection index)
    landing: Dict[int, List[tuple]] = {}
    for m in memory:
        t = m.tables
        landing[t.rank] = []
        for c in t.sends:
            peer = memory[c.peer]
            landing[t.rank].append((peer, [(x.peer, x.channel) for x in peer.tables.recvs].index((t.rank, c.channel))))
    abort = threading.Event()
    errors: List[BaseException] = []
    deadline = time.monotonic() + timeout

    def wait(array, index, value, what):
        while array[index] < value:
            if abort.is_set():
                raise BackendError(f"device emulator aborted while waiting for {what}")
            if time.monotonic() > deadline:
                abort.set()
                raise BackendError(f"device emulator: {what} not reached within {timeout} s; every block aborts")
            time.sleep(0)

    def block_main(m: RankMemory, b: int):
        t = m.tables
        try:
            for i, s in enumerate(t.blocks[b].steps):
                for other, v in s.waits:
                    wait(m.progress, other, v, f"rank {t.rank} block {other} progress {v}")
                if s.recv_conn >= 0:
                    seq = int(m.recv_base[s.recv_conn]) + s.recv_seq
                    wait(m.tail, s.recv_conn, seq + 1, f"rank {t.rank} receive #{seq} on connection {s.recv_conn}")
                if s.send_conn >= 0:
                    peer, at = landing[t.rank][s.send_conn]
                    sseq = int(m.send_base[s.send_conn]) + s.send_seq
                    wait(m.head, s.send_conn, sseq + 1 - t.window, f"rank {t.rank} slot for send #{sseq}")
                span = slice(s.offset, s.offset + s.count)
                if s.recv_conn >= 0:
                    slot = m.slots[s.recv_conn, seq % t.window, :s.count]
                    if s.op in ("recv", "recv_send"):
                        m.buf[span] = slot
                    else:
                        ufunc(m.buf[span], slot, out=m.buf[span])
                elif s.op == "copy":
                    m.buf[span] = m.buf[s.src_offset:s.src_offset + s.count]
                if s.send_conn >= 0:
                    peer.slots[at, sseq % t.window, :s.count] = m.buf[span]
                if s.recv_conn >= 0:  # the slot is free again: the sender's head
                    src = memory[t.recvs[s.recv_conn].peer]
                    back = [(x.peer, x.channel) for x in src.tables.sends].index((t.rank, t.recvs[s.recv_conn].channel))
                    src.head[back] = seq + 1
                if s.send_conn >= 0:  # the data is there: the receiver's tail
                    peer.tail[at] = sseq + 1
                if s.posts_progress:
                    m.progress[b] = i + 1
        except BaseException as e:  # noqa: BLE001 - every block's failure is reported by the caller
            abort.set()
            errors.append(e)

    threads = [threading.Thread(target=block_main, args=(m, b), daemon=True)
               for m in memory for b in range(len(m.tables.blocks))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise next((e for e in errors if "not reached" in str(e)), errors[0])
    for m in memory:
        for i, c in enumerate(m.tables.recvs):
            m.recv_base[i] += c.transfers
        for i, c in enumerate(m.tables.sends):
            m.send_base[i] += c.transfers
    return memory
