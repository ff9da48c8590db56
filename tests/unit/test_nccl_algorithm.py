"""The nccl algorithm's wiring (``blinkflow.backends.cuda.nccl``), with a recording stand-in for
``cupy.cuda.nccl`` (NCCL itself runs only on distinct GPUs; the fake CuPy has none, so there the
policy sees NCCL as absent): one communicator per process set from rank 0's unique id broadcast
over MPI, the all-reduce in place on the current stream with NCCL's dtype and op codes, typed
errors for what NCCL cannot reduce, and ``usable`` only where every rank has NCCL and a GPU of
its own."""
import contextlib
from types import SimpleNamespace

import numpy as np
import pytest

from blinkflow.backends.cuda import nccl
from blinkflow.errors import BackendError
from blinkflow.ops import ReduceOp


class Binding:
    """Records what the algorithm asks of ``cupy.cuda.nccl``."""

    NCCL_FLOAT32, NCCL_FLOAT16, NCCL_INT32 = 7, 6, 2
    NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = 0, 1, 2, 3

    def __init__(self):
        self.made, self.calls, self.destroyed = [], [], 0
        self.ids = 0

    def get_unique_id(self):
        self.ids += 1
        return ("uid", self.ids)

    def NcclCommunicator(self, size, uid, rank):  # noqa: N802 (CuPy's name)
        binding = self
        binding.made.append((size, uid, rank))

        class Communicator:
            def allReduce(self, send, recv, count, dtype, op, stream):  # noqa: N802
                binding.calls.append((send, recv, count, dtype, op, stream))

            def destroy(self):
                binding.destroyed += 1
        return Communicator()


class Comm:
    def __init__(self, rank, size, root_value=None):
        self.rank, self.size, self.root_value, self.bcasts = rank, size, root_value, 0

    def bcast(self, value, root):
        self.bcasts += 1
        return value if self.rank == root else self.root_value

    def allgather(self, value):
        return [value] * 1

    def allreduce(self, value, op):
        return value


def _cupy():
    return SimpleNamespace(cuda=SimpleNamespace(Device=lambda i: contextlib.nullcontext(),
                                                get_current_stream=lambda: SimpleNamespace(ptr=1234)))


def _buf(dtype="float32", n=10):
    return SimpleNamespace(dtype=np.dtype(dtype), size=n, data=SimpleNamespace(ptr=5000))


def test_one_communicator_per_process_set_from_rank_0s_id():
    binding = Binding()
    root = nccl.NcclAllreduce(_cupy(), Comm(0, 4), 0, binding=binding)
    other = nccl.NcclAllreduce(_cupy(), Comm(2, 4, root_value=("uid", 1)), 2, binding=binding)
    for _ in range(3):
        root.allreduce(_buf(), ReduceOp.SUM)
    other.allreduce(_buf("float16"), ReduceOp.AVERAGE)  # Average is Sum; the backend scales after
    assert binding.made == [(4, ("uid", 1), 0), (4, ("uid", 1), 2)]  # made once each, one id
    assert binding.ids == 1 and root.comm.bcasts == 1
    assert binding.calls[0] == (5000, 5000, 10, Binding.NCCL_FLOAT32, Binding.NCCL_SUM, 1234)  # in place, current stream
    assert binding.calls[-1][3:5] == (Binding.NCCL_FLOAT16, Binding.NCCL_SUM)
    root.allreduce(_buf("int32"), ReduceOp.MAX)
    assert binding.calls[-1][3:5] == (Binding.NCCL_INT32, Binding.NCCL_MAX)
    root.close()
    root.close()
    assert binding.destroyed == 1


def test_what_nccl_cannot_reduce_is_a_typed_error():
    algorithm = nccl.NcclAllreduce(_cupy(), Comm(0, 2), 0, binding=Binding())
    with pytest.raises(BackendError, match="BLINKFLOW_ALGORITHM=runner"):
        algorithm.allreduce(_buf("complex64"), ReduceOp.SUM)


def test_without_the_binding_the_algorithm_is_refused_and_nccl_is_not_usable():
    nccl_absent = SimpleNamespace(cuda=SimpleNamespace())  # the fake CuPy: no cupy.cuda.nccl
    with pytest.raises(BackendError, match=r"blinkflow\[gpu\]"):
        nccl.NcclAllreduce(nccl_absent, Comm(0, 2), 0)
    assert nccl.usable(nccl_absent, Comm(0, 2), Comm(0, 1), "0000:01:00.0") is False


def test_usable_needs_a_gpu_per_rank():
    class Shared(Comm):
        def allgather(self, value):
            return [value, value]  # two local ranks report one bus id (one GPU, or MIG instances of it)

    assert nccl.usable(None, Comm(0, 2), Comm(0, 1), "0000:01:00.0", binding=Binding()) is True
    assert nccl.usable(None, Comm(0, 2), Shared(0, 2), "0000:01:00.0", binding=Binding()) is False
