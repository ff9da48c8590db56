"""A synchronous mpi4py stand-in for ``blinkflow.runtime.api``, for the TensorFlow tests only.

The TF bindings and the runtime are built in parallel. Until ``blinkflow.runtime.api`` can be
imported, :func:`ensure_runtime` installs this module in its place so the bindings can be tested
against the runtime's contract (DESIGN §3.1): async handles, name matching with a
``TensorMismatchError`` raised on every rank. Each ``*_async`` call runs its collective at once
(every rank calls in the same order in these tests), so a handle is just the finished result.
Once the real runtime imports, it is used and this file is not.
"""
from __future__ import annotations

import sys
import types

import numpy as np

from blinkflow.errors import NotInitializedError, TensorMismatchError
from blinkflow.ops import ReduceOp, as_reduce_op

_comm = None


def ensure_runtime():
    """Import the real runtime when it exists, else register this stand-in under its name."""
    try:
        import blinkflow.runtime.api  # noqa: F401
        return "runtime"
    except ImportError:
        pass
    module = types.ModuleType("blinkflow.runtime.api")
    for name in ("init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size",
                 "cross_size", "cross_rank", "barrier", "allreduce_async", "grouped_allreduce_async",
                 "allgather_async", "broadcast_async", "reducescatter_async", "alltoall_async", "poll",
                 "synchronize", "allreduce", "grouped_allreduce", "allgather", "grouped_allgather",
                 "broadcast", "reducescatter", "alltoall", "broadcast_object", "allgather_object", "join"):
        setattr(module, name, globals()[name])
    sys.modules["blinkflow.runtime.api"] = module
    import blinkflow.runtime

    blinkflow.runtime.api = module
    return "standin"


def init(comm=None):
    global _comm
    from mpi4py import MPI

    _comm = comm or MPI.COMM_WORLD


def shutdown():
    global _comm
    _comm = None


def is_initialized():
    return _comm is not None


def _c():
    if _comm is None:
        raise NotInitializedError("a collective")
    return _comm


def size():
    return _c().size


def rank():
    return _c().rank


local_rank, local_size = rank, size


def cross_size():
    return 1


def cross_rank():
    return 0


def barrier():
    _c().barrier()


def join():
    _c().barrier()
    return 0


def _check(name, kind, array, **params):
    """Every rank compares what the others sent under ``name`` (Horovod's rule)."""
    mine = (kind, tuple(array.shape) if kind in ("allreduce", "broadcast", "reducescatter") else tuple(array.shape[1:]),
            str(array.dtype), tuple(sorted(params.items())))
    everyone = _c().allgather(mine)
    if any(other != mine for other in everyone):
        detail = "; ".join(f"rank {r} sent {e}" for r, e in enumerate(everyone))
        raise TensorMismatchError(f"tensor {name!r}: ranks disagree: {detail}", name=name)


_REDUCERS = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.PRODUCT: np.multiply}


def _reduce(array, op, pre, post):
    op = as_reduce_op(op)
    array = np.asarray(array)
    work = array.astype(np.float64) * pre if pre != 1.0 else array.astype(np.float64)
    parts = _c().allgather(work)
    out = parts[0].copy()
    for part in parts[1:]:
        out = _REDUCERS[op.combiner](out, part)
    if op is ReduceOp.AVERAGE:
        out = out / size()
    if post != 1.0:
        out = out * post
    return out.astype(array.dtype)


def allreduce(array, op=ReduceOp.AVERAGE, name=None, prescale_factor=1.0, postscale_factor=1.0, compression=None):
    array = np.asarray(array)
    _check(name, "allreduce", array, op=int(as_reduce_op(op)), pre=prescale_factor, post=postscale_factor)
    return _reduce(array, op, prescale_factor, postscale_factor)


def grouped_allreduce(arrays, op=ReduceOp.AVERAGE, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=None):
    return [allreduce(a, op, f"{name}.{i}", prescale_factor, postscale_factor) for i, a in enumerate(arrays)]


def allgather(array, name=None):
    array = np.asarray(array)
    _check(name, "allgather", array)
    return np.concatenate(_c().allgather(array), axis=0)


def grouped_allgather(arrays, name=None):
    return [allgather(a, f"{name}.{i}") for i, a in enumerate(arrays)]


def broadcast(array, root_rank, name=None):
    array = np.asarray(array)
    _check(name, "broadcast", array, root=root_rank)
    return _c().bcast(array, root=root_rank)


def reducescatter(array, op=ReduceOp.AVERAGE, name=None):
    array = np.asarray(array)
    _check(name, "reducescatter", array, op=int(as_reduce_op(op)))
    full = _reduce(array, op, 1.0, 1.0)
    n, s, r = full.shape[0], size(), rank()
    counts = [n // s + (1 if i < n % s else 0) for i in range(s)]
    start = sum(counts[:r])
    return full[start:start + counts[r]]


def alltoall(array, splits=None, name=None):
    array = np.asarray(array)
    _check(name, "alltoall", array)
    s = size()
    given = splits is not None
    if splits is None:
        splits = [array.shape[0] // s] * s
    splits = [int(x) for x in splits]
    offsets = np.cumsum([0] + splits)
    received = _c().alltoall([array[offsets[i]:offsets[i + 1]] for i in range(s)])
    out = np.concatenate(received, axis=0)
    recv_splits = np.array([p.shape[0] for p in received], dtype=np.int32)
    return (out, recv_splits) if given else out


def broadcast_object(obj, root_rank=0):
    return _c().bcast(obj, root=root_rank)


def allgather_object(obj):
    return _c().allgather(obj)


class _Done:
    def __init__(self, value):
        self.value = value


def allreduce_async(array, op=ReduceOp.AVERAGE, name=None, prescale_factor=1.0, postscale_factor=1.0):
    return _Done(allreduce(array, op, name, prescale_factor, postscale_factor))


def grouped_allreduce_async(arrays, op=ReduceOp.AVERAGE, name=None, prescale_factor=1.0, postscale_factor=1.0):
    return _Done(grouped_allreduce(arrays, op, name, prescale_factor, postscale_factor))


def allgather_async(array, name=None):
    return _Done(allgather(array, name))


def broadcast_async(array, root_rank, name=None):
    return _Done(broadcast(array, root_rank, name))


def reducescatter_async(array, op=ReduceOp.AVERAGE, name=None):
    return _Done(reducescatter(array, op, name))


def alltoall_async(array, splits=None, name=None):
    return _Done(alltoall(array, splits, name))


def poll(handle):
    return True


def synchronize(handle):
    return handle.value
