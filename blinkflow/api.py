"""The public collective API (docs/api.md), dispatched on the tensor's type.

numpy (and cupy) arrays go to the framework-neutral runtime (``blinkflow.runtime.api``) and
come back as the same kind of array. A framework's tensors go to the binding registered for the
framework (:func:`register_binding`): ``tf.Tensor``, ``tf.Variable`` and Keras variables to
``blinkflow.tensorflow.ops``, which returns differentiable ``tf.Tensor``s. This module knows no
framework; a binding is imported only when one of its tensors arrives.

Every collective takes ``process_set=`` (Horovod's): a :class:`~blinkflow.ProcessSet` the call
runs on, by default the global set (every rank).
"""
from __future__ import annotations

import importlib
import sys
from typing import Dict, Iterable

from .arrays import is_array
from .compression import Compression
from .ops import Average

_bindings: Dict[str, str] = {}
"""A framework's top-level module ("tensorflow", "keras") -> module of its binding's collectives."""
_modules = {}
"""The runtime and bindings once imported: an ``import`` statement in a function runs importlib's
Python code on every call (tens of microseconds on a cache-cold step)."""


def register_binding(frameworks: Iterable[str], module: str) -> None:
    """Send the tensors of ``frameworks`` (top-level module names) to the collectives of ``module``
    (imported once a framework is), which take this module's signatures; its ``accepts(value)``
    says which values are its tensors."""
    for framework in frameworks:
        _bindings[framework] = module


def _runtime():
    api = _modules.get("runtime")
    if api is None:
        from .runtime import api

        _modules["runtime"] = api
    return api


def _backend_for(tensor):
    """The binding whose ``accepts(tensor)`` is true, else the runtime. Arrays (recognised by
    protocol, :mod:`.arrays`) go to the runtime, and a framework's tensor can only exist once
    the framework is imported: no binding is imported for a framework that is not."""
    if not is_array(tensor):
        for framework, binding in _bindings.items():
            if framework in sys.modules:
                ops = _modules.get(binding)
                if ops is None:
                    ops = _modules[binding] = importlib.import_module(binding)
                if ops.accepts(tensor):
                    return ops
    return _runtime()


def allreduce(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none, process_set=None):
    """Reduce ``tensor`` across all ranks with ``op``; every rank gets the result."""
    return _backend_for(tensor).allreduce(tensor, op=op, name=name, prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor, compression=compression,
                                          process_set=process_set)


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=None):
    """All-reduce a list of tensors as one fused operation; returns a list. An empty list is
    negotiated too (every rank must pass one then), so a rank that passes none while the others
    pass tensors gets a TensorMismatchError like them instead of an early, unmatched return."""
    tensors = list(tensors)
    return (_backend_for(tensors[0]) if tensors else _runtime()).grouped_allreduce(
        tensors, op=op, name=name, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, compression=compression, process_set=process_set)


def allgather(tensor, name=None, process_set=None):
    """Concatenate every rank's ``tensor`` along the first dimension (which may differ per rank)."""
    return _backend_for(tensor).allgather(tensor, name=name, process_set=process_set)


def grouped_allgather(tensors, name=None, process_set=None):
    """All-gather each of ``tensors``; returns a list. An empty list is negotiated too (see
    :func:`grouped_allreduce`)."""
    tensors = list(tensors)
    return (_backend_for(tensors[0]) if tensors else _runtime()).grouped_allgather(tensors, name=name,
                                                                                 process_set=process_set)


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Every rank gets ``root_rank``'s ``tensor`` (a global rank, also in a process set)."""
    return _backend_for(tensor).broadcast(tensor, root_rank, name=name, process_set=process_set)


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduce across ranks and give each rank a slice of the first dimension
    (the first ``n % size`` ranks get one extra row)."""
    return _backend_for(tensor).reducescatter(tensor, op=op, name=name, prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor, process_set=process_set)


def grouped_reducescatter(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                          process_set=None):
    """Reduce-scatter each of ``tensors`` as one request; returns a list."""
    tensors = list(tensors)
    return (_backend_for(tensors[0]) if tensors else _runtime()).grouped_reducescatter(
        tensors, op=op, name=name, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set=process_set)


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Scatter slices of the first dimension to every rank and gather theirs.

    With ``splits`` given returns ``(output, received_splits)``, else the output alone (the
    first dimension must then divide evenly by the number of ranks).
    """
    return _backend_for(tensor).alltoall(tensor, splits=splits, name=name, process_set=process_set)
