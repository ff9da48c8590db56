"""All-reduce of ``tf.IndexedSlices`` (embedding gradients), Horovod's way: every rank's values
and indices are all-gathered, so the sum over ranks is taken without densifying (an index that
several ranks touch appears once per rank). Scale factors apply to the values with the runtime's
arithmetic (:mod:`blinkflow.scaling`); Average divides by the set's size. Only Average and Sum
are supported, as in Horovod.
"""
from __future__ import annotations

from typing import List

import tensorflow as tf

from .. import scaling
from ..errors import BlinkflowError, NotSupportedError
from ..ops import ReduceOp, as_reduce_op
from ..runtime import arguments
from . import differentiable, rank_ops
from .crossing import refuse


def check_op(op) -> ReduceOp:
    """``op`` as a ReduceOp, if IndexedSlices can be reduced with it; else NotSupportedError."""
    op = as_reduce_op(op)
    if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
        raise NotSupportedError(f"allreduce of tf.IndexedSlices supports only Average and Sum, not {op.name} "
                                "(as Horovod); densify with tf.convert_to_tensor, or sparse_as_dense=True")
    return op


def reduced_values(gathered: tf.Tensor, op: ReduceOp, size: int, postscale: float = 1.0) -> tf.Tensor:
    """Every rank's (prescaled) values, gathered, finished as ``op`` over ``size`` ranks would be."""
    if op is ReduceOp.AVERAGE:
        return scaling.tf_averaged(gathered, size, postscale)
    return scaling.tf_scaled(gathered, postscale)


def allreduce_slices(slices, op, name, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None) -> List[tf.IndexedSlices]:
    """All-reduce a list of IndexedSlices in one grouped all-gather named ``name``."""
    members = [s.values for s in slices] + [s.indices for s in slices]
    try:
        op = check_op(op)
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
    except NotSupportedError as error:
        if tf.executing_eagerly():
            # Every rank hears of this rank's refusal under the call's name (no rank waits for
            # it), then this rank raises Horovod's NotImplementedError. In a graph it raises
            # while tracing, as Horovod's does.
            try:
                refuse("allgather", name, error, members, process_set)
            except BlinkflowError:
                pass
        raise error
    except BlinkflowError as error:
        gathered = refuse("allgather", name, error, members, process_set)
        return [tf.IndexedSlices(v, i, dense_shape=s.dense_shape)
                for v, i, s in zip(gathered[:len(slices)], gathered[len(slices):], slices)]
    values = [scaling.tf_scaled(s.values, pre) for s in slices]
    gathered = differentiable.allgather(values + [s.indices for s in slices], name, process_set)
    size = rank_ops.size(process_set)
    return [tf.IndexedSlices(reduced_values(gathered[k], op, size, post), gathered[len(slices) + k],
                             dense_shape=s.dense_shape)
            for k, s in enumerate(slices)]
