"""The one crossing between TensorFlow and the runtime: tensors go to the backend that owns
their memory.

A collective on TF tensors becomes a Python function over arrays that enqueues on the runtime
and waits for the result. A whole list of tensors crosses in ONE call, so the runtime sees every
gradient of a step at once and fuses them. Two routes, the one :mod:`blinkflow.placement`
answers for the call's tensors:

* **device**: GPU tensors cross into CuPy by DLPack, without a copy (:mod:`..backends.cuda.dlpack`),
  are reduced by the cuda backend's tree schedule, and come back the same way (placed on, and
  synchronised on, the GPU the backend drives for this rank; a tensor TF keeps on the host is
  first placed there by TF). bfloat16, which CuPy lacks, is reduced in float32 on the device.
* **host**: CPU tensors become numpy arrays (``.numpy()``, a view where TF allows) for the cpu
  backend.

Eagerly the function runs directly and runtime errors arrive as the blinkflow errors, each also
an instance of the matching ``tf.errors`` class (:func:`._errors.as_tf_error`). Inside a graph
(a ``tf.function``, or a TF1 ``tf.Graph`` run by ``tf.compat.v1.Session``) it runs as one
stateful op: ``tf.numpy_function`` where only the host route is possible
(:func:`blinkflow.placement.tensors_may_go_to_device`), else ``tf.py_function``, which hands its function the
tensors where they live so the route is chosen per call. In a ``tf.function`` TF's automatic
control dependencies order stateful ops in program order, so every rank enqueues its collectives
in the same order even with one inter-op thread (no cross-rank deadlock). A TF1 graph run by a
Session orders nothing, so there a blocking call (:func:`call`, :func:`wait`) is a submit op, an
asynchronous wait that holds no thread, and a collect op (:mod:`._tf1`). Errors surface as
``tf.errors`` (see :mod:`._errors`).

A collective can also cross in two halves (:func:`submit`, :func:`wait`), so a training step
starts reducing early gradients while backprop computes the rest (:mod:`.gradients`): ``submit``
hands its tensors to the runtime and returns a handle (an int64 scalar) at once, never blocking a
TensorFlow thread; one ``wait`` takes the handles and returns every result. Errors of a submission
are kept with its handle and raised by the wait, which first synchronizes the other handles, so
no name stays in flight.

``conversions`` counts the tensors each route carried (``"host"``, ``"device"``): a GPU tensor
that went through the host would show here (the tests assert it does not). It ships because the
tests must see the route the production code takes, not a copy of it; a counter add per call is
its whole cost.
"""
from __future__ import annotations

import collections
import itertools
from typing import Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from .. import placement
from ..errors import BackendError, BlinkflowError
from . import _errors, _tf1, _xla
from ._naming import scope_name

conversions: "collections.Counter[str]" = collections.Counter()
#: TensorFlow refuses tensor memory not aligned to this (EIGEN_MAX_ALIGN_BYTES); CuPy allocates at 256.
_TF_ALIGN = 64
_route_cache = {}


def runtime():
    """``blinkflow.runtime.api``, imported on first use (it initialises MPI)."""
    from ..runtime import api

    return api


def _run_eager(fn, tensors, out_dtypes):
    """``fn`` on the tensors' arrays, by the route their placement asks for; tensors out."""
    return _to_tensors(fn(_to_arrays(tensors)), out_dtypes)


def _to_arrays(tensors) -> list:
    """The tensors' arrays for the runtime: cupy views by DLPack on the device route, numpy
    (views where TensorFlow allows) on the host route."""
    if placement.of_tensors(tensors) == placement.DEVICE:
        return _device_arrays(tensors)
    conversions["host"] += len(tensors)
    return [t.numpy() for t in tensors]


def _rank_device() -> int:
    """The CUDA ordinal the cuda backend drives for this rank (asked once per job)."""
    from ..runtime.global_state import RUNTIME

    layout = RUNTIME.running("a collective on GPU tensors").job.layout
    known = _route_cache.get("device")
    if known is None or known[0] is not layout:
        from ..backends.cuda.device import rank_device

        known = _route_cache["device"] = (layout, rank_device(layout))
    return known[1]


def _device_arrays(tensors) -> list:
    from ..backends.cuda.dlpack import tf_label, tf_to_cupy

    arrays = []
    if "tf_gpus" not in _route_cache:
        _route_cache["tf_gpus"] = bool(tf.config.get_visible_devices("GPU"))
    # Where TensorFlow has no GPU (a CPU build, or the CPU suite's fake CuPy playing one) there is
    # nothing to place on: the tensors cross as they are.
    where = f"/GPU:{tf_label(_rank_device())}" if _route_cache["tf_gpus"] else None
    try:
        with tf.device(where):
            # bfloat16, which CuPy lacks, is reduced in float32 (and cast back in _to_tensors)
            placed = [tf.cast(t, tf.float32) if t.dtype == tf.bfloat16 else (t if placement.on_gpu(t) else tf.identity(t))
                      for t in tensors]
        for i, t in enumerate(placed):
            arrays.append(tf_to_cupy(t, sync=i == len(placed) - 1))  # one device sync for the group
    except BlinkflowError:
        raise
    except Exception as e:  # CuPy refusing a capsule: say what to do rather than a DLPack trace
        raise BackendError(f"cannot hand TensorFlow's tensors to the cuda backend ({e}); place them on a GPU "
                           "or set BLINKFLOW_BACKEND=cpu") from None
    conversions["device"] += len(tensors)
    return arrays


def _to_tensors(outs, out_dtypes) -> List[tf.Tensor]:
    """Tensors of ``out_dtypes`` from the runtime's results: cupy arrays by DLPack, numpy
    arrays (host results, alltoall's received splits) by conversion."""
    if not any(_is_cupy(o) for o in outs):
        return [tf.convert_to_tensor(np.asarray(o, dtype=d.as_numpy_dtype)) for o, d in zip(outs, out_dtypes)]
    # aligned: a slice of a fused result may not be, and TensorFlow takes only aligned memory
    with _rank_device_scope():  # a copy runs on the thread's device: make it the results'
        aligned = [o.copy() if _is_cupy(o) and o.size and o.data.ptr % _TF_ALIGN else o for o in outs]
    # One device sync before TensorFlow sees anything, also when every output is empty: our
    # kernels ran on our streams and still read the inputs (TF may reuse their memory once this
    # returns) and write the outputs (TF reads them on its own streams).
    _synchronize()
    return [_to_tf(o, d) if _is_cupy(o) else tf.convert_to_tensor(np.asarray(o, dtype=d.as_numpy_dtype))
            for o, d in zip(aligned, out_dtypes)]


def _rank_device_scope():
    """The rank's GPU as the calling thread's current device, for a ``with`` block."""
    import cupy

    return cupy.cuda.Device(_rank_device())


def _synchronize() -> None:
    import cupy

    from ..backends.cuda.dlpack import synchronize

    synchronize(cupy, _rank_device())  # the GPU our work ran on, not this thread's


def _to_tf(array, dtype: tf.DType):
    from ..backends.cuda.dlpack import cupy_to_tf

    wide = dtype == tf.bfloat16
    tensor = cupy_to_tf(array, sync=False) if array.size else tf.zeros(array.shape, tf.float32 if wide else dtype)
    return tf.cast(tensor, tf.bfloat16) if wide else tensor


def _is_cupy(array) -> bool:
    """Whether a runtime result lives in GPU memory (the runtime's GPU results are CuPy arrays)."""
    from ..arrays import on_device

    return on_device(array)


@tf.autograph.experimental.do_not_convert
def call(fn: Callable[[List], Sequence], tensors: Sequence[tf.Tensor],
         out_dtypes: Sequence[tf.DType], out_shapes: Sequence[tf.TensorShape], name: str) -> List[tf.Tensor]:
    """Run ``fn`` on the arrays of ``tensors``; returns tensors of ``out_dtypes``/``out_shapes``."""
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]

    def on_numpy(arrays):
        conversions["host"] += len(arrays)
        return fn(arrays)

    return _cross(lambda eager: _run_eager(fn, eager, out_dtypes), on_numpy, fn, tensors, out_dtypes, out_shapes,
                  name, "runtime_call")


@tf.autograph.experimental.do_not_convert
def submit(fn: Callable[[List], int], tensors: Sequence[tf.Tensor], name: str) -> tf.Tensor:
    """Hand the arrays of ``tensors`` to ``fn``, which enqueues them on the runtime and returns
    its handle without waiting; returns the handle as an int64 scalar for :func:`wait`.

    Inside a graph this is one op whose only inputs are ``tensors``: TensorFlow runs it as soon
    as they are computed, while the rest of the graph (backprop) goes on. It never blocks a
    TensorFlow thread, so with any number of inter-op threads no rank can wait on a peer here.
    """
    tensors = list(tensors)
    if tf.executing_eagerly():
        return tf.constant(_start(fn, lambda: _to_arrays(tensors)), tf.int64)
    if _xla.in_xla_context():
        return _xla_call(lambda arrays: [np.int64(_start(fn, lambda: arrays))], tensors, [tf.int64], [[]], name,
                         copy_inputs=True)[0]
    if placement.tensors_may_go_to_device():
        def graph_fn(*eager):
            return np.int64(_start(fn, lambda: _to_arrays(list(eager))))

        with tf.name_scope(scope_name(name)):
            handle = tf.py_function(graph_fn, tensors, tf.int64, name="runtime_submit")
    else:
        def graph_fn(*arrays):
            conversions["host"] += len(arrays)
            return np.int64(_start(fn, lambda: list(arrays)))

        with tf.name_scope(scope_name(name)):
            handle = tf.numpy_function(graph_fn, tensors, tf.int64, stateful=True, name="runtime_submit")
    handle.set_shape([])
    return handle


@tf.autograph.experimental.do_not_convert
def wait(finishers: Sequence[Callable[[int], Sequence]], handles: Sequence[tf.Tensor],
         out_dtypes: Sequence[tf.DType], out_shapes: Sequence[tf.TensorShape], name: str) -> List[tf.Tensor]:
    """Synchronize ``handles`` of :func:`submit` in order (``finishers[i](handle)`` returns the
    list of arrays of handle i); returns all their results, one flat list of
    ``out_dtypes``/``out_shapes``. The first error of any handle is raised after every handle
    was synchronized."""
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    finishers = list(finishers)

    def collect(ids):
        outs, first_error = [], None
        for finish, handle in zip(finishers, ids):
            if handle < 0:  # the submission itself failed
                first_error = first_error or _deferred.pop(handle)
                continue
            try:
                outs.extend(finish(handle))
            except BlinkflowError as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return outs

    def on_eager(eager):
        return _to_tensors(collect([int(h) for h in eager]), out_dtypes)

    def on_ids(ids):
        return collect([int(h) for h in ids])

    return _cross(on_eager, on_ids, on_ids, handles, out_dtypes, out_shapes, name, "runtime_wait")


_deferred: Dict[int, BlinkflowError] = {}
"""Errors of submissions, under the negative handles that :func:`wait` raises them from."""
_deferred_ids = itertools.count(-1, -1)


def _xla_call(fn, tensors, out_dtypes, out_shapes, name, copy_inputs=False) -> List[tf.Tensor]:
    """:func:`._xla.call`, bfloat16 widened to float32 where the device route is possible (as
    :func:`_device_arrays` does: CuPy has no bfloat16)."""
    widen = placement.tensors_may_go_to_device()
    tensors = [tf.cast(t, tf.float32) if widen and t.dtype == tf.bfloat16 else t for t in tensors]
    wide = [tf.float32 if widen and tf.as_dtype(d) == tf.bfloat16 else d for d in out_dtypes]
    def counted(arrays):
        conversions["device" if any(hasattr(a, "__cuda_array_interface__") for a in arrays) else "host"] += len(arrays)
        return fn(arrays)

    with tf.name_scope(scope_name(name)):
        outs = _xla.call(counted, tensors, wide, out_shapes, name, copy_inputs)
    return [tf.cast(o, d) if o.dtype != d else o for o, d in zip(outs, map(tf.as_dtype, out_dtypes))]


def _start(fn, arrays_of) -> int:
    """``fn(arrays_of())``: a runtime handle, or a negative one standing for the error it raised."""
    try:
        return int(fn(arrays_of()))
    except BlinkflowError as error:
        key = next(_deferred_ids)
        _deferred[key] = error
        return key


def _cross(on_eager, on_numpy, on_arrays, tensors, out_dtypes, out_shapes, name, op_name) -> List[tf.Tensor]:
    """One blocking crossing: eagerly ``on_eager(tensors)``; in a ``tf.function`` one stateful op
    (``tf.py_function`` where the device route is possible, handing ``on_eager`` the tensors where
    they live, else ``tf.numpy_function`` calling ``on_numpy`` with arrays); in a TF1 graph
    :func:`._tf1.call` of ``on_arrays``, which holds no thread while it waits. Blinkflow errors
    surface as ``tf.errors`` (:mod:`._errors`)."""
    if tf.executing_eagerly():
        try:
            return on_eager(list(tensors))
        except BlinkflowError as error:  # a tf.errors class too: Horovod code catches those
            raise _errors.as_tf_error(error) from None
    if _xla.in_xla_context():
        return _xla_call(on_arrays, tensors, out_dtypes, out_shapes, name)
    if _tf1.in_tf1_graph() and _tf1.available():
        route = _tf1.Route(placement.tensors_may_go_to_device(), _to_arrays, _to_tensors, conversions)
        return _tf1.call(on_arrays, tensors, out_dtypes, out_shapes, name, route)

    if placement.tensors_may_go_to_device():
        def graph_fn(*eager):
            try:
                return _errors.ok(on_eager(list(eager)))
            except BlinkflowError as error:
                return _errors.failed(error, out_dtypes)

        with tf.name_scope(scope_name(name)):
            results = tf.py_function(graph_fn, list(tensors), list(out_dtypes) + _errors.STATUS_DTYPES, name=op_name)
    else:
        def graph_fn(*arrays):
            try:
                outs = on_numpy(list(arrays))
            except BlinkflowError as error:
                return _errors.failed(error, out_dtypes)
            return _errors.ok([np.asarray(o, dtype=d.as_numpy_dtype) for o, d in zip(outs, out_dtypes)])

        with tf.name_scope(scope_name(name)):
            results = tf.numpy_function(graph_fn, list(tensors), list(out_dtypes) + _errors.STATUS_DTYPES,
                                        stateful=True, name=op_name)
    outs = _errors.raise_on_failure(results[:len(out_dtypes)], results[len(out_dtypes):])
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs
