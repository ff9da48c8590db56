"""The device executor's launch arguments: a rank's tables as the flat int64 arrays the
interpreter kernel (``kernels/interpreter.cu``) and its numpy emulator
(:mod:`.device_emulator`) read, field for field.

* ``steps`` ``[nsteps, STEP_FIELDS]``: every block's steps back to back, a row per step (the
  ``STEP_*`` column indices below; ``op`` one of :data:`OP_CODES`; ``recv_row``/``send_row`` index
  ``conns``, -1 when the step does not receive/send; the step's progress waits are rows
  ``[wait_start, wait_start + wait_count)`` of ``waits``);
* ``waits`` ``[nwaits, 2]``: (block, progress within the call);
* ``block_start`` ``[nblocks + 1]``: block ``b`` runs steps ``[block_start[b], block_start[b + 1])``;
* ``conns`` ``[nrecv + nsend, CONN_FIELDS]``: receive connections first, then sends; per row the
  address of the ring of ``window`` slots (in the receiver's memory), of its ``tail`` counter (in the
  receiver's memory, written by the sender), of its ``head`` counter (in the sender's memory, written
  by the receiver) and the connection's transfers per call.

Counters are int64 and never restart: call ``c`` (counted from 0 per call shape) uses sequence
numbers from ``base = c * transfers`` on a connection, and block ``b`` posts progress
``c * progress_stride + i + 1`` after its step ``i``, so nothing is reset between launches.

Pure numpy: what the host uploads once per call shape.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..schedule.device_tables import RankTables

OP_CODES = {"send": 0, "recv": 1, "recv_reduce": 2, "recv_reduce_send": 3, "recv_send": 4, "copy": 5}
"""Op codes; ``kernels/interpreter.cu`` has the same numbers (``BF_STEP_*``)."""
(STEP_OP, STEP_OFFSET, STEP_COUNT, STEP_SRC, STEP_RECV_ROW, STEP_RECV_SEQ, STEP_SEND_ROW, STEP_SEND_SEQ,
 STEP_WAIT_START, STEP_WAIT_COUNT, STEP_POSTS) = range(11)
STEP_FIELDS = 11
CONN_SLOTS, CONN_TAIL, CONN_HEAD, CONN_TRANSFERS = range(4)
CONN_FIELDS = 4


@dataclasses.dataclass(frozen=True)
class EncodedTables:
    """One rank's tables as launch arrays (``conns`` gets its addresses from the backend)."""

    steps: np.ndarray
    waits: np.ndarray
    block_start: np.ndarray
    transfers: np.ndarray
    """Per ``conns`` row: transfers per call."""
    nrecv: int
    window: int
    slot_elems: int

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


def encode(t: RankTables) -> EncodedTables:
    """The launch arrays of ``t``."""
    nrecv = len(t.recvs)
    steps, waits, starts = [], [], [0]
    for block in t.blocks:
        for s in block.steps:
            steps.append((OP_CODES[s.op], s.offset, s.count, s.src_offset,
                          s.recv_conn if s.recv_conn >= 0 else -1, s.recv_seq,
                          nrecv + s.send_conn if s.send_conn >= 0 else -1, s.send_seq,
                          len(waits), len(s.waits), int(s.posts_progress)))
            waits.extend(s.waits)
        starts.append(len(steps))
    transfers = [c.transfers for c in t.recvs] + [c.transfers for c in t.sends]
    return EncodedTables(steps=np.array(steps, np.int64).reshape(-1, STEP_FIELDS),
                         waits=np.array(waits, np.int64).reshape(-1, 2), block_start=np.array(starts, np.int64),
                         transfers=np.array(transfers, np.int64), nrecv=nrecv, window=t.window,
                         slot_elems=max(1, t.slot_elems))
