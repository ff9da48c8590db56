"""The crossing when TensorFlow executes eagerly: the function runs at once, on the tensors'
arrays by their placement (:mod:`.arrays`), and a runtime error is raised as the blinkflow error
that is also an instance of the matching ``tf.errors`` class (:func:`.errors.as_tf_error`), so
Horovod code catching ``tf.errors.*`` and code catching blinkflow's classes both work.
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import tensorflow as tf

from ...errors import BlinkflowError
from . import arrays, errors, handles


def call(fn: Callable[[list], Sequence], tensors: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
         out_shapes, name: str) -> List[tf.Tensor]:
    """``fn`` on the arrays of ``tensors``; its results as tensors of ``out_dtypes``."""
    return _run(fn, arrays.of_tensors, tensors, out_dtypes)


def submit(fn: Callable[[list], int], tensors: Sequence[tf.Tensor], name: str) -> tf.Tensor:
    """``fn`` hands the arrays of ``tensors`` to the runtime; its handle as an int64 scalar."""
    return tf.constant(handles.start(fn, lambda: arrays.of_tensors(tensors)), tf.int64)


def wait(finishers, handle_tensors: Sequence[tf.Tensor], out_dtypes, out_shapes, name: str) -> List[tf.Tensor]:
    """Every result of the submissions ``handle_tensors`` (see :func:`.handles.collector`)."""
    return _run(handles.collector(finishers), arrays.handles, handle_tensors, out_dtypes)


def _run(fn, inputs_of, tensors, out_dtypes) -> List[tf.Tensor]:
    try:
        return arrays.to_tensors(fn(inputs_of(list(tensors))), [tf.as_dtype(d) for d in out_dtypes])
    except BlinkflowError as error:  # a tf.errors class too: Horovod code catches those
        raise errors.as_tf_error(error) from None
