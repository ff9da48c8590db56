"""The crossing inside a ``tf.function``: one stateful op per call.

The op is a ``tf.py_function`` where the device route is possible
(:func:`blinkflow.placement.tensors_may_go_to_device`): it hands its function the tensors where
they live, so the route is chosen per call by their placement (:mod:`.arrays`). Where only the
host route is possible it is a ``tf.numpy_function``, which hands numpy arrays. TensorFlow's
automatic control dependencies run stateful ops in program order, so every rank enqueues its
collectives in the same order even with one inter-op thread (no cross-rank deadlock).

A ``tf.numpy_function`` reports any Python exception as ``UnknownError``, so the op's function
never raises: it returns a status beside its outputs, and :func:`.errors.raise_on_failure` fails
the step with the ``tf.errors`` class of the runtime's error.

:func:`submit` is one op whose only inputs are its tensors: TensorFlow runs it as soon as they are
computed, while the rest of the graph (backprop) goes on, and it never blocks a TensorFlow thread.
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf

from ... import placement
from ...errors import BlinkflowError
from .._naming import scope_name
from . import arrays, errors, handles


@tf.autograph.experimental.do_not_convert
def call(fn: Callable[[list], Sequence], tensors: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
         out_shapes: Sequence[tf.TensorShape], name: str) -> List[tf.Tensor]:
    """One op running ``fn`` on the arrays of ``tensors``; tensors of ``out_dtypes``/``out_shapes``."""
    inputs_of = arrays.of_tensors if placement.tensors_may_go_to_device() else arrays.of_host
    return blocking_op(fn, inputs_of, tensors, out_dtypes, out_shapes, name, "runtime_call")


@tf.autograph.experimental.do_not_convert
def submit(fn: Callable[[list], int], tensors: Sequence[tf.Tensor], name: str) -> tf.Tensor:
    """One op handing the arrays of ``tensors`` to ``fn``, which enqueues them on the runtime and
    returns its handle without waiting; the handle as an int64 scalar."""
    tensors = list(tensors)
    with tf.name_scope(scope_name(name)):
        if placement.tensors_may_go_to_device():
            handle = tf.py_function(lambda *eager: np.int64(handles.start(fn, lambda: arrays.of_tensors(eager))),
                                    tensors, tf.int64, name="runtime_submit")
        else:
            handle = tf.numpy_function(lambda *host: np.int64(handles.start(fn, lambda: arrays.of_host(host))),
                                       tensors, tf.int64, stateful=True, name="runtime_submit")
    handle.set_shape([])
    return handle


@tf.autograph.experimental.do_not_convert
def wait(finishers, handle_tensors: Sequence[tf.Tensor], out_dtypes, out_shapes, name: str) -> List[tf.Tensor]:
    """One op returning every result of the submissions ``handle_tensors`` (see
    :func:`.handles.collector`)."""
    return blocking_op(handles.collector(finishers), arrays.handles, handle_tensors, out_dtypes, out_shapes, name,
                       "runtime_wait")


def blocking_op(fn, inputs_of, tensors, out_dtypes, out_shapes, name, op_name) -> List[tf.Tensor]:
    """One stateful op: ``fn(inputs_of(values))`` where ``values`` are what the op hands its
    function (eager tensors from a ``tf.py_function`` where the device route is possible, numpy
    arrays from a ``tf.numpy_function`` else), its results checked by
    :func:`.errors.raise_on_failure`."""
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    device = placement.tensors_may_go_to_device()

    def graph_fn(*values):
        try:
            outs = fn(inputs_of(list(values)))
            return errors.ok(arrays.to_tensors(outs, out_dtypes) if device else arrays.host_results(outs, out_dtypes))
        except BlinkflowError as error:
            return errors.failed(error, out_dtypes)

    with tf.name_scope(scope_name(name)):
        if device:
            results = tf.py_function(graph_fn, list(tensors), out_dtypes + errors.STATUS_DTYPES, name=op_name)
        else:
            results = tf.numpy_function(graph_fn, list(tensors), out_dtypes + errors.STATUS_DTYPES, stateful=True,
                                        name=op_name)
    outs = errors.raise_on_failure(results[:len(out_dtypes)], results[len(out_dtypes):])
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs
