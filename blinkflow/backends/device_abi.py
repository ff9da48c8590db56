"""The device executor's launch arguments: tables as the flat int64 arrays the interpreter
kernel (``kernels/interpreter.cu``) and its numpy emulator (:mod:`.device_emulator`) read, field
for field.

One launch runs a set of blocks; each block has its own buffer, so the same arrays describe one
rank's launch (every block on the rank's buffer) and a loopback launch that runs every virtual
rank's blocks at once (:func:`merge`):

* ``steps`` ``[nsteps, STEP_FIELDS]``: every block's steps back to back, a row per step (the
  ``STEP_*`` column indices below; ``op`` one of :data:`OP_CODES`; the step's receives are rows
  ``[recv_start, recv_start + recv_count)`` of ``inputs``, in combination order; ``send_row``
  indexes ``conns``, -1 when the step does not send; its progress waits are rows
  ``[wait_start, wait_start + wait_count)`` of ``waits``);
* ``inputs`` ``[ninputs, 2]``: (``conns`` row, transfer of that connection within the call);
* ``waits`` ``[nwaits, 2]``: (block of the launch, progress within the call);
* ``block_start`` ``[nblocks + 1]``: block ``b`` runs steps ``[block_start[b], block_start[b + 1])``;
* ``conns`` ``[nconns, CONN_FIELDS]``: per rank of the launch its receive connections, then its
  sends; per row the address of the ring of ``window`` slots (in the receiver's memory), of its
  ``tail`` counter (in the receiver's memory, written by the sender), of its ``head`` counter (in
  the sender's memory, written by the receiver) and the connection's transfers per call;
* ``block_offsets`` ``[nblocks]``: where, in elements from the launch's buffer argument, the
  buffer each block works on starts (0 for one rank; a virtual rank's row in the loopback mode).

Counters are int64 and never restart: call ``c`` (counted from 0 per call shape) uses sequence
numbers from ``base = c * transfers`` on a connection, and block ``b`` posts progress
``c * progress_stride + i + 1`` after its step ``i``, so nothing is reset between launches.

Pure numpy: what the host uploads once per call shape.
"""
from __future__ import annotations

import dataclasses
from typing import List, Sequence, Tuple

import numpy as np

from ..errors import ScheduleError
from ..schedule.device_tables import RankTables
from ..schedule.lower import SPAN_ALIGN_ELEMS

OP_CODES = {"send": 0, "recv": 1, "recv_reduce": 2, "recv_reduce_send": 3, "recv_send": 4, "copy": 5}
"""Op codes; ``kernels/interpreter.cu`` has the same numbers (``BF_STEP_*``)."""
(STEP_OP, STEP_OFFSET, STEP_COUNT, STEP_SRC, STEP_RECV_START, STEP_RECV_COUNT, STEP_SEND_ROW, STEP_SEND_SEQ,
 STEP_WAIT_START, STEP_WAIT_COUNT, STEP_POSTS) = range(11)
STEP_FIELDS = 11
CONN_SLOTS, CONN_TAIL, CONN_HEAD, CONN_TRANSFERS = range(4)
CONN_FIELDS = 4
MAX_STEP_INPUTS = 8
"""Most chunks one step combines (``BF_MAX_STEP_INPUTS`` in the kernel, which keeps their slot
addresses in shared memory); the cuda backend fuses at most 7 (its reduce kernel's 8 inputs
with the local value)."""


@dataclasses.dataclass(frozen=True)
class EncodedTables:
    """A launch's tables as arrays (``conns`` gets its addresses from the backend)."""

    steps: np.ndarray
    inputs: np.ndarray
    waits: np.ndarray
    block_start: np.ndarray
    transfers: np.ndarray
    """Per ``conns`` row: transfers per call."""
    nrecv: int
    """Receive rows of a one-rank launch (its sends follow); -1 for a merged launch."""
    window: int
    slot_elems: int
    """Elements of one ring slot: the largest transfer, rounded up to a multiple of
    :data:`~blinkflow.schedule.lower.SPAN_ALIGN_ELEMS` so that every slot of a ring (``ring +
    (seq % window) * slot_elems * itemsize``) starts 16-byte aligned for every itemsize."""

    @property
    def nblocks(self) -> int:
        return len(self.block_start) - 1

    @property
    def progress_stride(self) -> int:
        """What progress values advance by per call: more than any block's step count."""
        return int(self.block_start[-1]) + 1

    def conns(self, slots, tails, heads) -> np.ndarray:
        """The ``conns`` array from per-row addresses (receives first, then sends)."""
        rows = np.zeros((len(self.transfers), CONN_FIELDS), np.int64)
        rows[:, CONN_SLOTS] = slots
        rows[:, CONN_TAIL] = tails
        rows[:, CONN_HEAD] = heads
        rows[:, CONN_TRANSFERS] = self.transfers
        return rows

    def transfer_elems(self) -> List[List[int]]:
        """Per ``conns`` row, the elements of each transfer of one call."""
        out: List[List[int]] = [[0] * int(n) for n in self.transfers]
        for row in self.steps:
            count = int(row[STEP_COUNT])
            start = int(row[STEP_RECV_START])
            for conn, seq in self.inputs[start:start + int(row[STEP_RECV_COUNT])]:
                out[int(conn)][int(seq)] = count
            if row[STEP_SEND_ROW] >= 0:
                out[int(row[STEP_SEND_ROW])][int(row[STEP_SEND_SEQ])] = count
        return out


def encode(t: RankTables) -> EncodedTables:
    """The launch arrays of one rank's tables ``t`` (its receive rows first, then its sends)."""
    nrecv = len(t.recvs)
    steps, inputs, waits, starts = [], [], [], [0]
    for block in t.blocks:
        for s in block.steps:
            if len(s.recvs) > MAX_STEP_INPUTS:
                raise ScheduleError(f"a device step combines at most {MAX_STEP_INPUTS} received chunks; rank {t.rank} "
                                    f"has one of {len(s.recvs)}: compile the program with fewer fused inputs")
            steps.append((OP_CODES[s.op], s.offset, s.count, s.src_offset, len(inputs), len(s.recvs),
                          nrecv + s.send_conn if s.send_conn >= 0 else -1, s.send_seq,
                          len(waits), len(s.waits), int(s.posts_progress)))
            inputs.extend(s.recvs)
            waits.extend(s.waits)
        starts.append(len(steps))
    transfers = [c.transfers for c in t.recvs] + [c.transfers for c in t.sends]
    return EncodedTables(steps=np.array(steps, np.int64).reshape(-1, STEP_FIELDS),
                         inputs=np.array(inputs, np.int64).reshape(-1, 2),
                         waits=np.array(waits, np.int64).reshape(-1, 2), block_start=np.array(starts, np.int64),
                         transfers=np.array(transfers, np.int64), nrecv=nrecv, window=t.window,
                         slot_elems=aligned_slot_elems(t.slot_elems))


def aligned_slot_elems(largest_transfer: int) -> int:
    """A ring slot's elements: ``largest_transfer`` rounded up to whole units of
    :data:`~blinkflow.schedule.lower.SPAN_ALIGN_ELEMS` (at least one unit)."""
    return max(1, -(-largest_transfer // SPAN_ALIGN_ELEMS)) * SPAN_ALIGN_ELEMS


def merge(parts: Sequence[EncodedTables]) -> Tuple[EncodedTables, List[int], List[int]]:
    """One launch of several ranks' tables (the loopback mode): their blocks one after the other,
    ``conns`` rows, inputs and waits renumbered. Returns the merged tables, and per part its first
    block and its first ``conns`` row (the caller lays the parts' ``conns`` out in that order)."""
    if not parts:
        raise ScheduleError("a launch needs the tables of at least one rank")
    if len({(p.window, p.slot_elems) for p in parts}) != 1:
        raise ScheduleError("the ranks of one launch must share their window and slot size "
                            f"(got {sorted({(p.window, p.slot_elems) for p in parts})})")
    steps, inputs, waits, starts, transfers = [], [], [], [0], []
    first_block, first_row = [], []
    nblocks = nsteps = nrows = ninputs = nwaits = 0
    for p in parts:
        first_block.append(nblocks)
        first_row.append(nrows)
        s = p.steps.copy()
        s[:, STEP_RECV_START] += ninputs
        s[:, STEP_SEND_ROW] = np.where(s[:, STEP_SEND_ROW] >= 0, s[:, STEP_SEND_ROW] + nrows, -1)
        s[:, STEP_WAIT_START] += nwaits
        steps.append(s)
        inputs.append(p.inputs + np.array([nrows, 0], np.int64))
        waits.append(p.waits + np.array([nblocks, 0], np.int64))
        starts.extend(int(x) + nsteps for x in p.block_start[1:])
        transfers.append(p.transfers)
        nblocks += p.nblocks
        nsteps += len(p.steps)
        nrows += len(p.transfers)
        ninputs += len(p.inputs)
        nwaits += len(p.waits)
    merged = EncodedTables(steps=np.concatenate(steps).reshape(-1, STEP_FIELDS),
                           inputs=np.concatenate(inputs).reshape(-1, 2), waits=np.concatenate(waits).reshape(-1, 2),
                           block_start=np.array(starts, np.int64), transfers=np.concatenate(transfers),
                           nrecv=-1, window=parts[0].window, slot_elems=parts[0].slot_elems)
    return merged, first_block, first_row


_ALIGN = 256


@dataclasses.dataclass(frozen=True)
class LoopbackLaunch:
    """Every virtual rank's blocks in one launch on one device (the loopback mode), with all
    rings and counters in one block of memory of ``nbytes``: what :func:`loopback` lays out.
    Virtual rank ``r``'s buffer is row ``r`` of a ``[nranks, nelems]`` array."""

    encoded: EncodedTables
    block_offsets: np.ndarray
    """Per block, the element offset of its rank's row."""
    conn_offsets: np.ndarray
    """``[nconns, 3]``: byte offsets of each row's ring, tail and head in the memory block."""
    progress_offset: int
    """Byte offset of the ``int64[nblocks]`` progress counters."""
    nbytes: int
    nranks: int
    nelems: int

    def conns(self, base: int) -> np.ndarray:
        """The ``conns`` array for the memory block at address ``base``."""
        return self.encoded.conns(base + self.conn_offsets[:, 0], base + self.conn_offsets[:, 1],
                                  base + self.conn_offsets[:, 2])


def loopback(tables: Sequence[RankTables], itemsize: int) -> LoopbackLaunch:
    """The loopback launch of ``tables`` (index = rank; every rank of one call shape): each
    receive connection's ring and tail, each send's head and every block's progress at their
    own offsets of one memory block (zeroed once: counters never restart)."""
    if [t.rank for t in tables] != list(range(len(tables))):
        raise ScheduleError(f"a loopback launch needs the tables of ranks 0..{len(tables) - 1} in order, got "
                            f"{[t.rank for t in tables]}")
    if len({t.nelems for t in tables}) != 1:
        raise ScheduleError("the tables of one call shape have one buffer size on every rank")
    parts = [encode(t) for t in tables]
    merged, first_block, first_row = merge(parts)
    size = 0

    def take(nbytes: int) -> int:
        nonlocal size
        at = size
        size += -(-max(8, nbytes) // _ALIGN) * _ALIGN
        return at

    ring = merged.window * merged.slot_elems * itemsize
    recv_at = {}  # (receiver, sender, channel) -> (ring, tail)
    head_at = {}  # (sender, receiver, channel) -> head
    for t in tables:
        for c in t.recvs:
            recv_at[(t.rank, c.peer, c.channel)] = (take(ring), take(8))
        for c in t.sends:
            head_at[(t.rank, c.peer, c.channel)] = take(8)
    progress = take(8 * merged.nblocks)
    offsets = np.zeros((len(merged.transfers), 3), np.int64)
    for t, row in zip(tables, first_row):
        for c in t.recvs:
            offsets[row] = recv_at[(t.rank, c.peer, c.channel)] + (head_at[(c.peer, t.rank, c.channel)],)
            row += 1
        for c in t.sends:
            offsets[row] = recv_at[(c.peer, t.rank, c.channel)] + (head_at[(t.rank, c.peer, c.channel)],)
            row += 1
    nelems = tables[0].nelems
    block_offsets = np.zeros(merged.nblocks, np.int64)
    for r, (part, b0) in enumerate(zip(parts, first_block)):
        block_offsets[b0:b0 + part.nblocks] = r * nelems
    return LoopbackLaunch(encoded=merged, block_offsets=block_offsets, conn_offsets=offsets, progress_offset=progress,
                          nbytes=size, nranks=len(tables), nelems=nelems)
