"""The one crossing between TensorFlow and the runtime: tensors go to the backend that owns
their memory.

A collective on TF tensors becomes a Python function over arrays that enqueues on the runtime
and waits for the result. A whole list of tensors crosses in ONE call, so the runtime sees every
gradient of a step at once and fuses them. Two routes:

* **device**: GPU tensors cross into CuPy by DLPack, without a copy (:mod:`..backends.cuda.dlpack`),
  are reduced by the cuda backend's tree schedule, and come back the same way. Taken when a
  tensor lives on a GPU, or for every tensor when ``BLINKFLOW_BACKEND=cuda`` (a tensor TF keeps
  on the host is first placed on the GPU by TF). bfloat16, which CuPy lacks, is reduced in
  float32 on the device.
* **host**: CPU tensors become numpy arrays (``.numpy()``, a view where TF allows) for the cpu
  backend. ``BLINKFLOW_BACKEND=cpu`` sends every tensor this way.

Eagerly the function runs directly and runtime errors arrive as the blinkflow errors. Inside a
graph it runs as one stateful op: ``tf.numpy_function`` where only the host route is possible
(no CuPy, or ``BLINKFLOW_BACKEND=cpu``), else ``tf.py_function``, which hands its function the
tensors where they live so the route is chosen per call. TF's automatic control dependencies
order stateful ops in program order, so every rank enqueues its collectives in the same order
even with one inter-op thread (no cross-rank deadlock), and errors surface as ``tf.errors``
(see :mod:`._errors`).

``conversions`` counts the tensors each route carried (``"host"``, ``"device"``): a GPU tensor
that went through the host would show here (the tests assert it does not).
"""
from __future__ import annotations

import collections
from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf

from ..errors import BackendError, BlinkflowError
from . import _errors
from ._naming import scope_name

conversions: "collections.Counter[str]" = collections.Counter()
#: TensorFlow refuses tensor memory not aligned to this (EIGEN_MAX_ALIGN_BYTES); CuPy allocates at 256.
_TF_ALIGN = 64
_route_cache = {}


def runtime():
    """``blinkflow.runtime.api``, imported on first use (it initialises MPI)."""
    from ..runtime import api

    return api


def _device_possible() -> bool:
    """Whether any tensor may take the device route (decided once per process)."""
    possible = _route_cache.get("possible")
    if possible is None:
        from ..config import get_config

        backend = get_config().backend
        if backend == "cpu":
            possible = False
        elif backend == "cuda":
            possible = True
        else:
            from ..backends.cuda.device import is_available

            possible = is_available()
        _route_cache["possible"] = possible
    return possible


def _forced() -> bool:
    from ..config import get_config

    return get_config().backend == "cuda"


def _on_gpu(t) -> bool:
    return "GPU" in (getattr(t, "device", "") or "").upper()


def _run_eager(fn, tensors, out_dtypes):
    """``fn`` on the tensors' arrays, by the route their placement asks for; tensors out."""
    if _device_possible() and (_forced() or any(_on_gpu(t) for t in tensors)):
        return _device_route(fn, tensors, out_dtypes)
    conversions["host"] += len(tensors)
    outs = fn([t.numpy() for t in tensors])
    return [tf.convert_to_tensor(np.asarray(o, dtype=d.as_numpy_dtype)) for o, d in zip(outs, out_dtypes)]


def _device_route(fn, tensors, out_dtypes):
    from ..backends.cuda.dlpack import tf_to_cupy

    widened = [t.dtype == tf.bfloat16 for t in tensors]
    arrays = []
    try:
        with tf.device("/GPU:0"):
            placed = [tf.cast(t, tf.float32) if wide else (t if _on_gpu(t) else tf.identity(t))
                      for t, wide in zip(tensors, widened)]
        for i, t in enumerate(placed):
            arrays.append(tf_to_cupy(t, sync=i == len(placed) - 1)[0])  # one device sync for the group
    except BlinkflowError:
        raise
    except Exception as e:  # CuPy refusing a capsule: say what to do rather than a DLPack trace
        raise BackendError(f"cannot hand TensorFlow's tensors to the cuda backend ({e}); place them on a GPU "
                           "or set BLINKFLOW_BACKEND=cpu") from None
    conversions["device"] += len(tensors)
    outs = fn(arrays)
    results = []
    for o, d in zip(outs, out_dtypes):
        if not _is_cupy(o):  # alltoall's received splits are numpy
            results.append(tf.convert_to_tensor(np.asarray(o, dtype=d.as_numpy_dtype)))
            continue
        wide = d == tf.bfloat16
        if o.size and o.data.ptr % _TF_ALIGN:
            o = o.copy()  # a slice of a fused result; TensorFlow takes only aligned memory
        results.append(o)
    # One device sync before TensorFlow sees anything: our kernels ran on our streams and still
    # read the inputs (TF may reuse their memory once this returns) and write the outputs (TF
    # reads them on its own streams).
    _synchronize()
    return [_to_tf(o, d) if _is_cupy(o) else o for o, d in zip(results, out_dtypes)]


def _synchronize() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def _to_tf(array, dtype: tf.DType):
    from ..backends.cuda.dlpack import cupy_to_tf

    wide = dtype == tf.bfloat16
    tensor = cupy_to_tf(array, sync=False) if array.size else tf.zeros(array.shape, tf.float32 if wide else dtype)
    return tf.cast(tensor, tf.bfloat16) if wide else tensor


def _is_cupy(array) -> bool:
    return type(array).__module__.split(".")[0] == "cupy"


@tf.autograph.experimental.do_not_convert
def call(fn: Callable[[List], Sequence], tensors: Sequence[tf.Tensor],
         out_dtypes: Sequence[tf.DType], out_shapes: Sequence[tf.TensorShape], name: str) -> List[tf.Tensor]:
    """Run ``fn`` on the arrays of ``tensors``; returns tensors of ``out_dtypes``/``out_shapes``."""
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    if tf.executing_eagerly():
        return _run_eager(fn, tensors, out_dtypes)

    if _device_possible():
        def graph_fn(*eager):
            try:
                outs = _run_eager(fn, list(eager), out_dtypes)
            except BlinkflowError as error:
                return _errors.failed(error, out_dtypes)
            return _errors.ok(outs)

        with tf.name_scope(scope_name(name)):
            results = tf.py_function(graph_fn, list(tensors), list(out_dtypes) + _errors.STATUS_DTYPES,
                                     name="runtime_call")
    else:
        def graph_fn(*arrays):
            conversions["host"] += len(arrays)
            try:
                outs = fn(list(arrays))
            except BlinkflowError as error:
                return _errors.failed(error, out_dtypes)
            return _errors.ok([np.asarray(o, dtype=d.as_numpy_dtype) for o, d in zip(outs, out_dtypes)])

        with tf.name_scope(scope_name(name)):
            results = tf.numpy_function(graph_fn, list(tensors), list(out_dtypes) + _errors.STATUS_DTYPES,
                                        stateful=True, name="runtime_call")
    outs = _errors.raise_on_failure(results[:len(out_dtypes)], results[len(out_dtypes):])
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs
