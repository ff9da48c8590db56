"""blinkflow: Horovod-style data-parallel training with Blink's topology-aware collectives.

``import blinkflow as bf`` is cheap: it imports neither MPI, TensorFlow nor CuPy. The runtime
(and with it mpi4py, which initialises MPI) is loaded on first use of a runtime name, and the
TensorFlow bindings on first use of a TensorFlow name, so this works on machines without them.

Modules and subpackages, one job each:

``api``            the public collective API, dispatched on the tensor's type
``arrays``         what an argument is, recognised by the protocols it speaks
``capabilities``   Horovod's build and capability queries (``mpi_built()``, ``nccl_built()``, ...)
``child_process``  running a command that dies with this process, children included
``compression``    gradient compression around a collective (Horovod's ``Compression``)
``config``         the one configuration object: every ``BLINKFLOW_*`` variable read once
``errors``         the one error hierarchy, under ``BlinkflowError``
``ops``            reduction operations (Horovod's names)
``placement``      host or device: where a collective's data is reduced, decided once
``processes``      whether a process lives, from its pid
``scaling``        Horovod's pre/post-scale arithmetic, defined once
``setting_text``   the one reader of a setting's text (environment, config file, flag)
``sizes``          byte sizes as people write them, read and printed one way
``version``        the one place the version is written
``topology``       subpackage: the hardware graph, presets, parsers, JSON
``planner``        subpackage: pure planning, Topology in, Plan out
``schedule``       subpackage: what every executor runs (IR, lowering, checker, runner, policy)
``sim``            subpackage: schedules in virtual time, NCCL baselines
``runtime``        subpackage: the per-process engine (negotiation, fusion, executor, process sets)
``backends``       subpackage: the executors of collectives (cpu, cuda)
``tensorflow``     subpackage: the TensorFlow / Keras bindings
``keras``          subpackage: ``blinkflow.keras``, the same module as ``blinkflow.tensorflow.keras``
``elastic``        subpackage: elastic training (re-forming on the survivors, growing)
``bench``          subpackage: the benchmarks (``python -m blinkflow.bench``)
"""
from __future__ import annotations

import importlib

from .api import (allgather, allreduce, alltoall, broadcast, grouped_allgather, grouped_allreduce,
                  grouped_reducescatter, reducescatter, register_binding)
from .capabilities import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                           nccl_built, rocm_built, sycl_built)
from .compression import Compression
from .config import apply_mpi_defaults_in_a_rank
from .errors import (BackendError, BlinkflowError, ConfigError, DuplicateNameError, InitError, InvalidArgumentError,
                     NotInitializedError, NotSupportedError, PlanError, ProcessSetError, ShutdownError,
                     TensorMismatchError, TopologyError)
from .ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum
from .runtime.process_sets import ProcessSet, global_process_set
from .version import __version__

# Under a plain mpirun, Open MPI's settings must be in place before mpi4py starts MPI, which the
# script may do right after this import.
apply_mpi_defaults_in_a_rank()

# The TensorFlow binding (imported when a TF tensor or a TF name is first used; it registers
# itself on import too).
register_binding(("tensorflow", "keras"), "blinkflow.tensorflow.ops")

# Names served lazily: attribute -> module that defines it.
_RUNTIME_NAMES = (
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "barrier", "join", "broadcast_object", "allgather_object",
    "allreduce_async", "grouped_allreduce_async", "allgather_async", "broadcast_async",
    "reducescatter_async", "alltoall_async", "poll", "synchronize", "mpi_threads_supported",
    "grouped_allgather_async", "grouped_broadcast_async", "grouped_reducescatter_async",
    "add_process_set", "remove_process_set", "get_process_set_ids_and_ranks", "comm_process_set_id",
    "is_homogeneous", "start_timeline", "stop_timeline",
)
_TF_NAMES = (
    "DistributedOptimizer", "DistributedGradientTape", "broadcast_variables", "load_model",
)
_LAZY = dict([(n, "blinkflow.runtime.api") for n in _RUNTIME_NAMES] +
             [(n, "blinkflow.tensorflow") for n in _TF_NAMES] +
             [("callbacks", "blinkflow.tensorflow.keras.callbacks")])


def __getattr__(name):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'blinkflow' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if name == "callbacks" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__", "Average", "Sum", "Min", "Max", "Product", "Adasum", "ReduceOp", "Compression",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "reducescatter",
    "grouped_reducescatter", "alltoall", "ProcessSet", "global_process_set",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "sycl_built",
    "BlinkflowError", "NotInitializedError", "ShutdownError", "TensorMismatchError", "DuplicateNameError",
    "TopologyError", "PlanError", "ConfigError", "BackendError", "InvalidArgumentError", "InitError", "ProcessSetError",
    "NotSupportedError",
] + list(_LAZY)
