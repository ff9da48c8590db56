"""The one crossing between TensorFlow and the runtime.

A collective on TF tensors becomes a Python function over numpy arrays that enqueues on the
runtime and waits for the result. A whole list of tensors crosses in ONE call, so the runtime
sees every gradient of a step at once and fuses them.

Eagerly the function runs directly and runtime errors arrive as the blinkflow errors. Inside a
graph it runs as one *stateful* ``tf.numpy_function``: TF's automatic control dependencies then
order stateful ops in program order, so every rank enqueues its collectives in the same order
even with one inter-op thread (no cross-rank deadlock), and errors surface as ``tf.errors``
(see :mod:`._errors`).
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np
import tensorflow as tf

from ..errors import BlinkflowError
from . import _errors
from ._naming import scope_name


def runtime():
    """``blinkflow.runtime.api``, imported on first use (it initialises MPI)."""
    from ..runtime import api

    return api


@tf.autograph.experimental.do_not_convert
def call(fn: Callable[[List[np.ndarray]], Sequence[np.ndarray]], tensors: Sequence[tf.Tensor],
         out_dtypes: Sequence[tf.DType], out_shapes: Sequence[tf.TensorShape], name: str) -> List[tf.Tensor]:
    """Run ``fn`` on the numpy values of ``tensors``; returns tensors of ``out_dtypes``/``out_shapes``."""
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    if tf.executing_eagerly():
        outs = fn([t.numpy() for t in tensors])
        return [tf.convert_to_tensor(np.asarray(o, dtype=d.as_numpy_dtype)) for o, d in zip(outs, out_dtypes)]

    def graph_fn(*arrays):
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
