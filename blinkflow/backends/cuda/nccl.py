"""NCCL's all-reduce as one algorithm of the call-shape policy (``nccl``), for the cases where
NCCL is already optimal: on a whole NVSwitch box Blink's trees reach the per-GPU link rate that
NCCL's rings reach too (and NCCL's NVLS goes beyond it), so the policy hands such all-reduces to
NCCL, as MSCCL falls back to NCCL's own algorithms where none of its own applies.

Through CuPy's ``cupy.cuda.nccl`` (the NCCL wheel of the ``gpu`` extra). One
``NcclCommunicator`` per process set, made at the first NCCL call: rank 0 draws the unique id and
the backend's communicator broadcasts it (every rank reaches that call together: the policy's
choice is agreed). The all-reduce runs in place on the calling thread's current stream -- the
stream the backend packed the buffer on and copies the result out on -- so the backend's
pieces-in / output / scale contract holds unchanged around it.

NCCL refuses two ranks on one GPU and cannot run where CuPy was built without it:
:func:`usable` says whether this job may choose it (the fake CuPy of the CPU tests has no
``cupy.cuda.nccl``, so there the policy sees NCCL as absent).
"""
from __future__ import annotations

from ...errors import BackendError
from ...ops import ReduceOp

DTYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
          "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
          "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16"}
"""numpy dtype name -> ``cupy.cuda.nccl`` constant (NCCL's ``ncclDataType_t``)."""
OPS = {ReduceOp.SUM: "NCCL_SUM", ReduceOp.PRODUCT: "NCCL_PROD", ReduceOp.MAX: "NCCL_MAX", ReduceOp.MIN: "NCCL_MIN"}
"""Combining op -> ``cupy.cuda.nccl`` constant (``ncclRedOp_t``); Average is Sum, then the
backend's scale."""


def module(cupy):
    """CuPy's NCCL binding, or None where CuPy has none (built without NCCL, the fake CuPy).
    ``cupy`` is the CuPy in use (its ``cuda`` package holds the binding)."""
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None
    return nccl if getattr(nccl, "available", True) else None


def usable(cupy, comm, local_comm, bus_id: str, binding=None) -> bool:
    """Whether NCCL can run this job's all-reduces: CuPy has NCCL on every rank and no two ranks
    of a host drive one GPU (NCCL refuses them; MIG instances of one GPU report its bus id, and
    count as one). Collective over ``comm`` and ``local_comm``; the same answer on every rank."""
    from mpi4py import MPI

    buses = local_comm.allgather(bus_id.lower())
    mine = (binding or module(cupy)) is not None and len(set(buses)) == len(buses)
    return bool(comm.allreduce(int(mine), op=MPI.MIN))


class NcclAllreduce:
    """NCCL's in-place all-reduce over the ranks of ``comm`` (one rank per GPU)."""

    def __init__(self, cupy, comm, device: int, binding=None):
        self.cupy = cupy
        self.comm = comm
        self.device = device
        self._nccl = binding or module(cupy)
        if self._nccl is None:
            raise BackendError("NCCL was chosen, but CuPy here has no cupy.cuda.nccl: install blinkflow[gpu] "
                               "(the NCCL wheel) or set BLINKFLOW_ALGORITHM=runner")
        self._communicator = None

    def communicator(self):
        """This process set's communicator, made once: rank 0's unique id, broadcast over MPI."""
        if self._communicator is None:
            uid = self._nccl.get_unique_id() if self.comm.rank == 0 else None
            uid = self.comm.bcast(uid, root=0)
            with self.cupy.cuda.Device(self.device):
                self._communicator = self._nccl.NcclCommunicator(self.comm.size, uid, self.comm.rank)
        return self._communicator

    def allreduce(self, buf, op: ReduceOp) -> None:
        """Reduce ``buf`` (flat, contiguous, on this rank's GPU) in place by ``op``'s combiner, on
        the current stream."""
        dtype = DTYPES.get(buf.dtype.name)
        combiner = OPS.get(ReduceOp(op).combiner)
        if dtype is None or combiner is None:
            raise BackendError(f"NCCL reduces {', '.join(DTYPES)} by sum, product, min or max; got {buf.dtype.name} "
                               f"and {ReduceOp(op).name.lower()}: set BLINKFLOW_ALGORITHM=runner")
        stream = self.cupy.cuda.get_current_stream()
        self.communicator().allReduce(buf.data.ptr, buf.data.ptr, buf.size, getattr(self._nccl, dtype),
                                      getattr(self._nccl, combiner), stream.ptr)

    def close(self) -> None:
        """Destroy the communicator (after the device finished with it)."""
        communicator, self._communicator = self._communicator, None
        if communicator is not None:
            communicator.destroy()
