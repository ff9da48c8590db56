"""``import blinkflow.tensorflow as hvd``: Horovod's ``horovod.tensorflow`` names, on blinkflow.

Importing this module imports TensorFlow and Keras (and checks their versions, see
:mod:`._compat`); the runtime, and with it MPI, still loads on first use (``hvd.init()``).
Collectives dispatch on the argument: TF tensors and variables give differentiable tensors,
numpy arrays give numpy arrays.
"""
from __future__ import annotations

import importlib

from .. import _RUNTIME_NAMES
from .. import api as _dispatch
from ..api import allgather, allreduce, alltoall, broadcast, reducescatter, register_binding
from ..compression import Compression
from ..errors import (BlinkflowError, DuplicateNameError, NotInitializedError, ShutdownError,
                      TensorMismatchError)
from ..ops import Average, Max, Min, Product, ReduceOp, Sum
from . import _compat  # noqa: F401  (version check on import)
from . import callbacks
from .gradient_tape import DistributedGradientTape
from . import ops as _ops
from .ops import grouped_broadcast
from .optimizer import DistributedOptimizer, load_model
from .variables import broadcast_variables

register_binding(("tensorflow", "keras"), "blinkflow.tensorflow.ops")  # blinkflow.allreduce(tf tensor) lands here


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none):
    """``blinkflow.grouped_allreduce``, except that an empty list is a TensorFlow call (inside a
    ``tf.function`` it must run with the graph, as the other ranks' non-empty calls do)."""
    tensors = list(tensors)
    return (_dispatch if tensors else _ops).grouped_allreduce(
        tensors, op=op, name=name, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        compression=compression)


def grouped_allgather(tensors, name=None):
    """``blinkflow.grouped_allgather``; an empty list is a TensorFlow call (see grouped_allreduce)."""
    tensors = list(tensors)
    return (_dispatch if tensors else _ops).grouped_allgather(tensors, name=name)


def __getattr__(name):
    # init, size, rank, ... come from the runtime, loaded on first use like ``blinkflow.<name>``.
    if name in _RUNTIME_NAMES:
        value = getattr(importlib.import_module("blinkflow.runtime.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_RUNTIME_NAMES))


__all__ = [
    "Average", "Sum", "Min", "Max", "Product", "ReduceOp", "Compression",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "grouped_broadcast",
    "reducescatter", "alltoall", "DistributedOptimizer", "DistributedGradientTape", "broadcast_variables",
    "load_model", "callbacks", "BlinkflowError", "NotInitializedError", "ShutdownError", "TensorMismatchError",
    "DuplicateNameError",
] + list(_RUNTIME_NAMES)
