"""The reference executor: every collective as plain MPI data movement plus a numpy reduction.

It ignores the plan on purpose. It is the runtime's executor of last resort (used when the
shared-memory ``cpu`` backend is not installed) and the oracle tests compare the planned
executors against. Reductions gather every rank's contribution and combine them in rank order
with numpy, so every dtype numpy knows works (float16 and bool included, which MPI lacks) and
the result is bitwise identical on every rank.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ops import ReduceOp
from .base import Backend, BackendContext

_UFUNCS = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.PRODUCT: np.multiply}


def _bytes(buf) -> np.ndarray:
    return buf.reshape(-1).view(np.uint8)


class ReferenceBackend(Backend):
    name = "reference"

    def __init__(self, ctx: BackendContext):
        self.ctx = ctx
        self.comm = ctx.comm
        self._buffer = np.empty(0, np.uint8)

    def buffer(self, nelems: int, dtype):
        dtype = np.dtype(dtype)
        need = nelems * dtype.itemsize
        if self._buffer.nbytes < need:
            self._buffer = np.empty(need, np.uint8)
        return self._buffer[:need].view(dtype)

    def _combine(self, stacked: np.ndarray, op: ReduceOp, out: np.ndarray) -> None:
        ufunc = _UFUNCS[ReduceOp(op).combiner]
        out[...] = stacked[0]
        for row in stacked[1:]:
            ufunc(out, row, out=out)

    def allreduce(self, buf, op: ReduceOp) -> None:
        size = self.comm.Get_size()
        if size == 1 or buf.size == 0:
            return
        stacked = np.empty((size, buf.size), buf.dtype)
        self.comm.Allgather(_bytes(buf), stacked.view(np.uint8))
        self._combine(stacked, op, buf.reshape(-1))

    def broadcast(self, buf, root: int) -> None:
        if buf.size:
            self.comm.Bcast(_bytes(buf), root=root)

    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        item = recv.dtype.itemsize
        byte_counts = [c * item for c in counts]
        self.comm.Allgatherv(_bytes(send), [_bytes(recv), byte_counts])

    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp) -> None:
        rank = self.comm.Get_rank()
        total = self.buffer(send.size, send.dtype)
        total[...] = send.reshape(-1)
        self.allreduce(total, op)
        start = sum(counts[:rank])
        recv.reshape(-1)[...] = total[start:start + counts[rank]]

    def alltoall(self, send, send_counts: Sequence[int], recv, recv_counts: Sequence[int]) -> None:
        item = send.dtype.itemsize
        sc = [c * item for c in send_counts]
        rc = [c * item for c in recv_counts]
        self.comm.Alltoallv([_bytes(send), sc], [_bytes(recv), rc])
