"""The cpu backend's ``mpi`` algorithm: a small all-reduce by MPI's own all-reduce.

A call of a few kilobytes is latency bound. The runner's pipelined trees cost every rank a few
control messages and Python actions per chunk whatever its size (a 1-float all-reduce spent
~75 us in the runner on 2 ranks of the development VM), while MPI's all-reduce of a few bytes
takes a microsecond or two inside one C call (recursive doubling, Open MPI's choice for small
messages). So the policy (:func:`blinkflow.schedule.policy.choose`) hands calls up to
``MPI_ALLREDUCE_MAX_BYTES`` of MPI's dtypes to MPI, as NCCL uses its low-latency protocol, and
MSCCL its fallback, where a schedule's steps cost more than its bytes.

The reduction is non-blocking and waited on like a runner's first message (:mod:`..quiet_wait`:
tested for ``SPIN_S``, which covers a call whose peers are there, then with sleeps growing with
the wait, since a late peer may be descheduled or still computing and a spinning wait would take
its core; the runtime's ``failure`` ends the wait), so a peer that dies mid-call ends it the way
it ends a runner's call.
Every rank gets the same bits, as the trees give them: Open MPI's algorithms either have the
two ranks of a pair add the same two values in either order (recursive doubling; IEEE addition
and multiplication are commutative, exactly) or reduce each block once and hand it on (ring,
Rabenseifner). The MPI standard only recommends this; the cpu backend's test cases check it at
2, 3 and 4 ranks.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp
from ...scaling import scaled_copy
from .. import quiet_wait


#: The timeline phase of a call it runs (``policy.Choice.phase`` of its algorithm).
PHASE = "ALGORITHM_MPI"


class MpiAllreduce:
    """MPI's all-reduce of packed pieces, on the backend's communicator."""

    def __init__(self, comm, failure: Optional[Callable[[], Optional[BaseException]]] = None,
                 mark: Callable[[str, str], None] = lambda ph, what: None, stats: Optional[dict] = None):
        from mpi4py import MPI

        self.comm = comm
        self.failure = failure
        self._mark = mark
        """The backend's timeline mark (``mark("start" | "end", phase)``)."""
        self.stats = stats if stats is not None else {"mpi": 0}
        """The backend's counters: ``"mpi"`` counts the calls run here."""
        self._ops = {ReduceOp.SUM: MPI.SUM, ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX,
                     ReduceOp.PRODUCT: MPI.PROD}
        self._in_place = MPI.IN_PLACE
        self._scratch = np.empty(0, np.uint8)
        """Where several pieces (or a prescaled one) are packed; grown as needed, never shrunk
        (bounded by ``MPI_ALLREDUCE_MAX_BYTES`` under ``auto``)."""

    def run(self, pieces: Sequence[np.ndarray], op: ReduceOp, out: np.ndarray, scale: float = 1.0,
            prescale: float = 1.0) -> None:
        """``out`` = the all-reduce of the concatenation of ``pieces`` (flat, of ``out``'s dtype),
        each first times ``prescale``, times ``scale``. A single unscaled piece is read where it
        lies; otherwise the pieces are packed into a private buffer first."""
        self.stats["mpi"] += 1
        mark = self._mark
        mark("start", PHASE)
        try:
            if len(pieces) == 1 and prescale == 1.0:
                send = pieces[0]
            else:
                mark("start", "COPY_IN")
                send = self._packed(out.shape[0], out.dtype)
                if pieces:
                    np.concatenate(pieces, out=send)
                if prescale != 1.0:
                    scaled_copy(send, send, prescale)
                mark("end", "COPY_IN")
            self._reduce(send, out, op)
            if scale != 1.0:
                scaled_copy(out, out, scale)
        finally:
            mark("end", PHASE)

    def run_in_place(self, buf: np.ndarray, op: ReduceOp) -> None:
        """``buf`` = the all-reduce of every rank's ``buf``."""
        self.stats["mpi"] += 1
        self._mark("start", PHASE)
        try:
            self._reduce(self._in_place, buf, op)
        finally:
            self._mark("end", PHASE)

    def _reduce(self, send, out: np.ndarray, op: ReduceOp) -> None:
        mpi_op = self._ops.get(op)  # (a ReduceOp hashes as its int: no enum call on this path)
        if mpi_op is None:
            mpi_op = self._ops.get(ReduceOp(op).combiner)
        if mpi_op is None:
            raise BackendError(f"MPI's all-reduce cannot combine with {op!r}")
        quiet_wait.wait(self.comm.Iallreduce(send, out, op=mpi_op), failure=self.failure)

    def _packed(self, nelems: int, dtype: np.dtype) -> np.ndarray:
        nbytes = nelems * dtype.itemsize
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, np.uint8)
        return self._scratch[:nbytes].view(dtype)
