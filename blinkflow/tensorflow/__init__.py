"""``import blinkflow.tensorflow as hvd``: Horovod's ``horovod.tensorflow`` names, on blinkflow.

Importing this module imports TensorFlow and Keras (and checks their versions, see
:mod:`._compat`); the runtime, and with it MPI, still loads on first use (``hvd.init()``).
Collectives dispatch on the argument: TF tensors and variables give differentiable tensors
(eagerly, in ``tf.function`` and in TF1 graphs run by ``tf.compat.v1.Session``), numpy arrays
give numpy arrays. Every collective takes ``process_set=``.

Modules and subpackages, one job each:

``api``               ``hvd.allreduce`` & co. with Horovod's keyword arguments and positional order
``ops``               collectives on tf.Tensor, tf.Variable and Keras variables, with Horovod's gradients
``raw_ops``           one collective on a list of TF tensors as ONE runtime request, without a gradient
``differentiable``    the collectives of ``raw_ops`` with Horovod's gradients
``rank_ops``          ranks and sizes for the binding, and Horovod's ``size_op``, ``rank_op``, ...
``objects``           ``broadcast_object``, ``broadcast_object_fn``, ``allgather_object``
``variables``         ``broadcast_variables`` and the TF1 ``broadcast_global_variables`` / hook
``optimizer``         ``DistributedOptimizer`` for any Keras 3 optimizer
``legacy_optimizer``  ``DistributedOptimizer`` for TF1's ``tf.compat.v1.train.Optimizer``
``gradient_tape``     ``DistributedGradientTape`` for custom loops
``gradients``         averaging a step's gradients over ranks in buckets, each submitted now, all waited once
``local_gradients``   gradients that stay on their rank (``register_local_var`` & co.)
``buckets``           gradient buckets, in the order backprop produces them
``submit_order``      making TensorFlow submit a bucket the moment backprop produced it
``sparse``            all-reduce of ``tf.IndexedSlices`` by all-gather, Horovod's way
``sparse_agreement``  agreeing which of a step's gradients travel sparse
``sync_batch_norm``   ``SyncBatchNormalization``: batch statistics over every rank
``elastic``           ``hvd.elastic`` for TensorFlow: ``run`` and the TF / Keras states
``gpu_setup``         what ``init()`` does to TensorFlow's GPUs before TF initialises them
``keras``             subpackage: ``blinkflow.tensorflow.keras``, Horovod's Keras names, and the Keras
                      glue: callbacks, epoch alignment, Keras 2 calls
``crossing``          subpackage: TF tensors into the runtime and back, one module per mode (eager,
                      ``tf.function``, TF1 graph, XLA)
``_compat``           every TensorFlow / Keras version check
``_deprecated``       deprecated Horovod arguments that still work and warn once
``_library_cache``    the op libraries' cache folder: what may be loaded, what a killed build left
``_naming``           deterministic default names, so unnamed collectives match across ranks
``_op_library``       the C++ ops, compiled on first use against the installed TensorFlow
"""
from __future__ import annotations

import importlib
import sys

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
from . import elastic  # noqa: F401
from .keras import callbacks, keras2_calls  # noqa: F401  (keras2_calls: opt.variables() accepted)
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
#: Horovod's module path ``horovod.tensorflow.keras.callbacks`` lives in the Keras glue; the
#: bindings' own path to it (``import blinkflow.tensorflow.callbacks``) names the same module.
sys.modules[__name__ + ".callbacks"] = callbacks

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
