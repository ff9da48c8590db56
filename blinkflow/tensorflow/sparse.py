"""All-reduce of ``tf.IndexedSlices`` (embedding gradients), Horovod's way: every rank's values
and indices are all-gathered, so the sum over ranks is taken without densifying (an index that
several ranks touch appears once per rank); Average divides by the set's size. As in Horovod,
only Average and Sum are supported and scale factors are not (NotImplementedError on every rank:
scale the values, or densify).
"""
from __future__ import annotations

from typing import List

import tensorflow as tf

from .. import scaling
from ..errors import BlinkflowError, NotSupportedError
from ..ops import ReduceOp, as_reduce_op
from ..runtime import arguments
from . import differentiable, rank_ops
from .raw_ops import refuse


def check_op(op) -> ReduceOp:
    """``op`` as a ReduceOp, if IndexedSlices can be reduced with it; else NotSupportedError."""
    op = as_reduce_op(op)
    if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
        raise NotSupportedError(f"allreduce of tf.IndexedSlices supports only Average and Sum, not {op.name} "
                                "(as Horovod); densify with tf.convert_to_tensor, or sparse_as_dense=True")
    return op


def reduced_values(gathered: tf.Tensor, op: ReduceOp, size: int) -> tf.Tensor:
    """Every rank's values, gathered, finished as ``op`` over ``size`` ranks would be. Average
    divides as Horovod does, by TensorFlow's true division (integer values average to floats)."""
    if op is not ReduceOp.AVERAGE:
        return gathered
    if gathered.dtype == tf.bool:
        return scaling.tf_averaged(gathered, size)
    return gathered / tf.cast(size, gathered.dtype)


def allreduce_slices(slices, op, name, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None) -> List[tf.IndexedSlices]:
    """All-reduce a list of IndexedSlices in one grouped all-gather named ``name``."""
    # Horovod's callers may give values as a list of tensors: one tensor, as TensorFlow would stack it.
    members = [tf.convert_to_tensor(s.values) for s in slices] + [tf.convert_to_tensor(s.indices) for s in slices]
    try:
        op = check_op(op)
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
        if pre != 1.0 or post != 1.0:
            raise NotSupportedError(f"allreduce of tf.IndexedSlices takes no scale factors (prescale {pre}, "
                                    f"postscale {post}), as Horovod; scale the values yourself, or densify with "
                                    "tf.convert_to_tensor")
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
    gathered = differentiable.allgather(members, name, process_set)
    size = rank_ops.size(process_set)
    return [tf.IndexedSlices(reduced_values(gathered[k], op, size), gathered[len(slices) + k],
                             dense_shape=s.dense_shape)
            for k, s in enumerate(slices)]
