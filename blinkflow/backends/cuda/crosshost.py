"""Phase 2 of Blink's three-phase all-reduce (§5): the ranks that hold the same shard on every
host combine it across machines.

The transport is the best this machine offers, chosen once:

``nccl``     ``cupy.cuda.nccl`` all-gather of the shards (GPUDirect RDMA where the fabric has it)
``cuda-mpi`` CUDA-aware MPI ``Allgather`` on device memory
``staged``   device -> pinned host memory -> MPI ``Allgather`` -> device (always works)

Every transport only *gathers*: each rank then combines the hosts' shards itself with one fused
kernel in host order. Floating-point sums are not associative, so combining in the same order
everywhere is what makes the result bitwise identical on every rank, whatever the transport
(an MPI or NCCL all-reduce promises no such thing across implementations).
"""
from __future__ import annotations

from typing import Optional

from ...errors import BackendError
from ...ops import ReduceOp
from . import kernels
from .device import cuda_aware_mpi, nccl_available
from .launch import reduce_ptrs

TRANSPORTS = ("nccl", "cuda-mpi", "staged")


def pick_transport(preferred: Optional[str] = None) -> str:
    if preferred is not None:
        if preferred not in TRANSPORTS:
            raise BackendError(f"unknown cross-host transport {preferred!r}; use one of {', '.join(TRANSPORTS)}")
        return preferred
    if nccl_available():
        return "nccl"
    if cuda_aware_mpi():
        return "cuda-mpi"
    return "staged"


class CrossHost:
    """All-reduces one shard per rank across ``cross_comm`` (one rank per host)."""

    def __init__(self, cross_comm, transport: Optional[str] = None):
        import cupy

        self.cupy = cupy
        self.comm = cross_comm
        self.transport = pick_transport(transport)
        self._nccl = None
        self._pinned = None
        self._gather = None
        if self.transport == "nccl" and cross_comm.size > 1:
            try:
                from cupy.cuda import nccl

                uid = nccl.get_unique_id() if cross_comm.rank == 0 else None
                uid = cross_comm.bcast(uid, root=0)
                self._nccl = nccl.NcclCommunicator(cross_comm.size, uid, cross_comm.rank)
            except Exception:
                # Every rank must agree on the transport: fall back together.
                self._nccl = None
            if not all(cross_comm.allgather(self._nccl is not None)):
                self._nccl = None
                self.transport = "cuda-mpi" if cuda_aware_mpi() else "staged"

    def _gather_buffer(self, nelems: int, dtype):
        need = self.comm.size * nelems
        if self._gather is None or self._gather.size < need or self._gather.dtype != dtype:
            self._gather = self.cupy.empty(need, dtype=dtype)
        return self._gather[:need].reshape(self.comm.size, nelems)

    def allgather(self, shard):
        """``[hosts, shard.size]`` array of every host's shard, in host (cross rank) order."""
        out = self._gather_buffer(shard.size, shard.dtype)
        if self.transport == "nccl" and self._nccl is not None:
            from cupy.cuda import nccl

            stream = self.cupy.cuda.get_current_stream().ptr
            self._nccl.allGather(shard.data.ptr, out.data.ptr, shard.nbytes, nccl.NCCL_UINT8, stream)
        elif self.transport == "cuda-mpi":
            self.cupy.cuda.get_current_stream().synchronize()  # MPI reads device memory now
            self.comm.Allgather(shard, out)
        else:
            self._staged_allgather(shard, out)
        return out

    def _staged_allgather(self, shard, out) -> None:
        import numpy as np

        total = out.nbytes
        if self._pinned is None or self._pinned.size < total + shard.nbytes:
            mem = self.cupy.cuda.alloc_pinned_memory(total + shard.nbytes)
            self._pinned = np.frombuffer(mem, dtype=np.uint8, count=total + shard.nbytes)
            self._pinned_mem = mem  # keep the pinned allocation alive
        send = self._pinned[:shard.nbytes]
        recv = self._pinned[shard.nbytes:shard.nbytes + total]
        shard.view(self.cupy.uint8).get(out=send)  # synchronous on the current stream
        self.comm.Allgather(send, recv)
        out.view(self.cupy.uint8).reshape(-1).set(recv)

    def allreduce(self, shard, op: ReduceOp, dtype: str) -> None:
        """Combine ``shard`` (a contiguous cupy array) over hosts, in place, in host order."""
        if self.comm.size == 1 or shard.size == 0:
            return
        parts = self.allgather(shard)
        # Host order, at most MAX_INPUTS per launch: ((h0 op h1 ... op h7) op h8 ...) everywhere.
        first = parts[0]
        rest = list(range(1, parts.shape[0]))
        acc_ptr = first.data.ptr
        while rest:
            take, rest = rest[:kernels.MAX_INPUTS - 1], rest[kernels.MAX_INPUTS - 1:]
            reduce_ptrs(dtype, op, shard.data.ptr, [acc_ptr] + [parts[h].data.ptr for h in take],
                        shard.size, shard.dtype.itemsize)
            acc_ptr = shard.data.ptr

    def close(self) -> None:
        self._nccl = None
        self._gather = None
        self._pinned = None
