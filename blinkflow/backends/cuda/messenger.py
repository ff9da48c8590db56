"""READY/FREE control messages over MPI between the ranks of one host (STYLE habit 7: MPI
carries control messages, the buffers move over NVLink).

Messages are three int64s ``(kind, channel, seq)`` sent with non-blocking ``Isend`` on a
communicator duplicated for the executor, so they can never match another layer's receives.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from .pipeline import Messenger

_TAG = 0xB1


class MpiMessenger(Messenger):
    def __init__(self, comm):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm  # a Dup() owned by the backend
        self._pending: List[Tuple[object, np.ndarray]] = []
        self._inbox = np.empty(3, dtype=np.int64)
        self._status = MPI.Status()

    def post(self, dst: int, kind: int, channel: int, seq: int) -> None:
        msg = np.array([kind, channel, seq], dtype=np.int64)
        self._pending.append((self.comm.Isend(msg, dest=dst, tag=_TAG), msg))
        if len(self._pending) > 256:  # reap completed sends so the list stays short
            self._pending = [(r, m) for r, m in self._pending if not r.Test()]

    def _take(self) -> Tuple[int, int, int, int]:
        self.comm.Recv(self._inbox, source=self.MPI.ANY_SOURCE, tag=_TAG, status=self._status)
        kind, channel, seq = (int(x) for x in self._inbox)
        return kind, self._status.Get_source(), channel, seq

    def wait(self) -> Tuple[int, int, int, int]:
        return self._take()

    def poll(self):
        out = []
        while self.comm.Iprobe(source=self.MPI.ANY_SOURCE, tag=_TAG):
            out.append(self._take())
        return out

    def flush(self) -> None:
        if self._pending:
            self.MPI.Request.Waitall([r for r, _ in self._pending])
            self._pending = []
