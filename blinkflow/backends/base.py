"""The interface every executor implements (STYLE habit 6: backends behind one interface).

The runtime hands a backend flat, 1-D, C-contiguous buffers of one dtype (the fusion buffer or
a single large tensor) and asks for one collective at a time, always in the same order on every
rank. Averaging, pre- and post-scaling are separate :meth:`Backend.scale` calls, so ``op`` here is
always an elementwise combiner (``ReduceOp.combiner``: SUM, MIN, MAX or PRODUCT).

A backend gets everything it needs in a :class:`BackendContext`; communicators are passed in,
never fished from globals (STYLE habit 7).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Optional, Sequence, Tuple

from ..config import Config
from ..ops import ReduceOp


@dataclasses.dataclass
class BackendContext:
    """What the runtime gives a backend at construction."""

    comm: Any
    """mpi4py communicator of the job (or process set); its ranks are the participating ranks."""
    local_comm: Any
    """Ranks on the same host (``comm.Split_type(MPI.COMM_TYPE_SHARED)``), ordered by global rank."""
    cross_comm: Any
    """Ranks with the same local rank on every host, ordered by host."""
    topology: Any
    """The job's :class:`blinkflow.topology.Topology` (already subset to the allocated devices)."""
    devices: Tuple[int, ...]
    """``devices[r]`` is the topology device id that rank ``r`` drives."""
    plan_for: Callable[..., Any]
    """``plan_for(collective, root=None) -> Plan``, memoised by the runtime; plans are verified."""
    config: Config
    timeline: Optional[Any] = None
    """An object with ``start(name, phase)`` / ``end(name, phase)`` or None."""


class Backend(abc.ABC):
    """Executes collectives on flat contiguous buffers; every call is collective over ``comm``."""

    name: str = "abstract"

    @abc.abstractmethod
    def buffer(self, nelems: int, dtype) -> Any:
        """A working buffer of ``nelems`` elements of ``dtype`` on which the collectives below run
        fastest (a shared-memory window, device memory). Valid until the next ``buffer`` call with
        a larger size; the runtime packs the fusion buffer into it to avoid an extra copy. The
        runtime writes it only before a collective on it (packing, prescale); afterwards it only
        reads it (copy-out; the postscale runs on the copy), so peers may still read a rank's
        buffer after that rank's collective returned."""

    @abc.abstractmethod
    def allreduce(self, buf, op: ReduceOp, out=None, scale: float = 1.0) -> None:
        """Combine ``buf`` elementwise across ranks; bitwise identical on every rank.

        In place when ``out`` is None. Otherwise the result times ``scale`` lands in ``out`` (same
        size and dtype, private to this rank) and ``buf`` is left in an unspecified state: the
        backend may fold the copy out and the scaling into its last pass over the data."""

    def allreduce_pieces(self, pieces: Sequence[Any], op: ReduceOp, out, scale: float = 1.0) -> None:
        """All-reduce the concatenation of ``pieces`` (flat C-contiguous arrays of ``out``'s dtype, ``out.size``
        elements in all, the same shapes on every rank) into ``out`` times ``scale``. The pieces
        are only read, and not after the call returns. By default they are packed into
        :meth:`buffer` and reduced there; a backend that can read its peers' pieces where they
        lie overrides this to skip the packing copy."""
        buf = self.buffer(out.shape[0], out.dtype)
        at = 0
        for piece in pieces:
            buf[at:at + piece.shape[0]] = piece
            at += piece.shape[0]
        self.allreduce(buf, op, out=out, scale=scale)

    @abc.abstractmethod
    def broadcast(self, buf, root: int) -> None:
        """Overwrite ``buf`` on every rank with rank ``root``'s ``buf``, in place."""

    @abc.abstractmethod
    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        """``recv`` (``sum(counts)`` elements) gets every rank's ``send`` (``counts[rank]``) in rank order."""

    @abc.abstractmethod
    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp) -> None:
        """Combine ``send`` (``sum(counts)`` elements) across ranks; rank r gets slice r in ``recv``."""

    @abc.abstractmethod
    def alltoall(self, send, send_counts: Sequence[int], recv, recv_counts: Sequence[int]) -> None:
        """Rank r sends ``send_counts[q]`` elements to rank q (in rank order) and receives
        ``recv_counts[q]`` from each."""

    def scale(self, buf, factor: float) -> None:
        """Multiply ``buf`` by ``factor`` in place (Average, pre/postscale). Integer buffers are
        scaled in float64 and truncated toward zero, like Horovod."""
        if factor == 1.0:
            return
        kind = getattr(buf.dtype, "kind", "f")
        if kind in "iub":
            buf[...] = (buf * factor).astype(buf.dtype)
        else:
            buf *= buf.dtype.type(factor)

    def barrier(self) -> None:
        self_comm = getattr(self, "comm", None)
        if self_comm is not None:
            self_comm.Barrier()

    def close(self) -> None:
        """Release shared memory, IPC handles, streams. Safe to call twice."""
