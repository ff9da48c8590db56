"""``import blinkflow.tensorflow as hvd``: Horovod's ``horovod.tensorflow`` names, on blinkflow.

Importing this module imports TensorFlow and Keras (and checks their versions, see
:mod:`._compat`); the runtime, and with it MPI, still loads on first use (``hvd.init()``).
Collectives dispatch on the argument: TF tensors and variables give differentiable tensors
(eagerly, in ``tf.function`` and in TF1 graphs run by ``tf.compat.v1.Session``), numpy arrays
give numpy arrays. Every collective takes ``process_set=``.
"""
from __future__ import annotations

import importlib

from .. import _RUNTIME_NAMES
from ..api import register_binding
from ..capabilities import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                            nccl_built, rocm_built, sycl_built)
from ..compression import Compression
from ..errors import (BlinkflowError, DuplicateNameError, InvalidArgumentError, NotInitializedError,
                      NotSupportedError, ProcessSetError, ShutdownError, TensorMismatchError)
from ..ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum
from ..runtime.process_sets import ProcessSet, global_process_set
from . import _compat  # noqa: F401  (version check on import)
from . import callbacks, elastic, keras2_calls  # noqa: F401  (keras2_calls: opt.variables() accepted)
from .api import (allgather, allreduce, alltoall, broadcast, grouped_allgather, grouped_allreduce,
                  grouped_reducescatter, reducescatter)
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from .objects import allgather_object, broadcast_object, broadcast_object_fn
from .ops import broadcast_, grouped_broadcast
from .optimizer import DistributedOptimizer, PartialDistributedOptimizer, load_model
from .sync_batch_norm import SyncBatchNormalization
from .rank_ops import local_rank_op, local_size_op, process_set_included_op, rank_op, size_op
from .variables import BroadcastGlobalVariablesHook, broadcast_global_variables, broadcast_variables

register_binding(("tensorflow", "keras"), "blinkflow.tensorflow.ops")  # blinkflow.allreduce(tf tensor) lands here

#: Served by the runtime (``blinkflow.runtime.api``) and loaded on first use, so that importing
#: this module does not start MPI; the object collectives above replace the runtime's own.
_FROM_RUNTIME = tuple(n for n in _RUNTIME_NAMES if n not in ("broadcast_object", "allgather_object", "init"))


def init(comm=None, process_sets=None) -> None:
    """``blinkflow.init`` (see :func:`blinkflow.runtime.api.init`), then TensorFlow's GPUs set up
    for the job before TF initialises them (:mod:`.gpu_setup`): TF shown this rank's GPU only,
    and growing its memory instead of taking it all when the cuda backend needs room."""
    from ..runtime import api as runtime
    from . import gpu_setup

    runtime.init(comm, process_sets)
    gpu_setup.prepare()


def __getattr__(name):
    # init, size, rank, ... come from the runtime, loaded on first use like ``blinkflow.<name>``.
    if name in _FROM_RUNTIME:
        value = getattr(importlib.import_module("blinkflow.runtime.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_FROM_RUNTIME))


__all__ = [
    "init", "Average", "Sum", "Min", "Max", "Product", "Adasum", "ReduceOp", "Compression",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "broadcast_",
    "grouped_broadcast", "reducescatter", "grouped_reducescatter", "alltoall",
    "DistributedOptimizer", "PartialDistributedOptimizer", "DistributedGradientTape",
    "PartialDistributedGradientTape", "broadcast_variables", "broadcast_global_variables",
    "BroadcastGlobalVariablesHook", "broadcast_object", "broadcast_object_fn", "allgather_object", "load_model",
    "callbacks", "elastic", "SyncBatchNormalization", "ProcessSet", "global_process_set",
    "size_op", "rank_op", "local_size_op", "local_rank_op", "process_set_included_op",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "sycl_built",
    "BlinkflowError", "NotInitializedError", "ShutdownError", "TensorMismatchError", "DuplicateNameError",
    "InvalidArgumentError", "NotSupportedError", "ProcessSetError",
] + list(_FROM_RUNTIME)
