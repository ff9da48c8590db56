"""The collectives of :mod:`.raw_ops` with Horovod's gradients, one rule per collective:

- allreduce      -> allreduce of the gradient with the same op and scale factors (itself
                    differentiable); only Average and Sum have a gradient
- allgather      -> gradient averaged over the set, sliced to this rank's rows
- broadcast      -> gradient averaged over the set on the root, zeros elsewhere
- reducescatter  -> allgather of the gradient, times the set's size for Sum
- alltoall       -> alltoall of the gradient back with the received splits

Every rank runs the same collectives in a gradient, whatever its rank, eagerly, inside
``tf.function`` and in TF1 graphs (where a Session runs only what the fetched tensors depend on,
so a result a rank does not use must still depend on the collective). A gradient's collective is
named after its forward one (:func:`gradient_name`). :mod:`.ops` wraps
these with naming, argument checks and compression; the bucketed reducer of :mod:`.gradients`
reduces by its own route and takes the all-reduce rule from here (:func:`allreduce_gradient`).
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import tensorflow as tf

from ..errors import BlinkflowError
from ..ops import ReduceOp
from . import _naming, rank_ops
from .raw_ops import raw

Gradient = Callable[[List[tf.Tensor], List[tf.Tensor], List[tf.Tensor]], List[tf.Tensor]]
"""(output gradients, inputs, outputs) -> input gradients."""


def custom(forward: Callable[[List[tf.Tensor]], Sequence[tf.Tensor]], gradient: Gradient):
    """``forward`` (tensors -> tensors) with ``gradient`` as its gradient; an output gradient
    that TensorFlow leaves None (an unused output) arrives as zeros."""
    @tf.custom_gradient
    def run(*xs):
        ys = list(forward(list(xs)))

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            return gradient(dys, list(xs), ys)

        return ys, grad

    def call(tensors) -> List[tf.Tensor]:
        out = run(*tensors)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    return call


def gradient_name(name: str) -> str:
    """The name of the collective in a gradient of the call ``name``: ``<name>/grad``, made unique
    in the trace of the function being built (:func:`._naming.derived_name`). There TensorFlow
    builds one forward op's gradient once per ``tf.gradients`` call (Horovod's tests take one
    per output of a grouped op) and a step may run them all at once, so each needs a name of its
    own; every rank builds the same function in the same order, so the names agree, whatever
    name scope (a Keras layer's, a gradient body's) the gradient is built in. Eagerly each
    gradient has run before the next is built: the name repeats."""
    return _naming.derived_name(name + "/grad")


# ---------------------------------------------------------------- allreduce
def allreduce(tensors, op, name, prescale_factor=1.0, postscale_factor=1.0, process_set=None) -> List[tf.Tensor]:
    def forward(xs):
        return raw("allreduce", xs, name, process_set, op=op, prescale_factor=prescale_factor,
                   postscale_factor=postscale_factor)

    def gradient(dys, xs, ys):
        return allreduce_gradient(dys, op, gradient_name(name), prescale_factor, postscale_factor, process_set)

    return custom(forward, gradient)(tensors)


def allreduce_gradient(dys, op, grad_name, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Horovod's all-reduce gradient: the output gradients all-reduced with the same op and scale
    factors, under ``grad_name``."""
    if op not in (ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.ADASUM):
        raise BlinkflowError(f"no gradient for allreduce with op {op.name}: only Average, Sum and Adasum are "
                             "differentiable")
    return allreduce(dys, op, grad_name, prescale_factor, postscale_factor, process_set)


# ---------------------------------------------------------------- allgather
def allgather(tensors, name, process_set=None) -> List[tf.Tensor]:
    def gradient(dys, xs, ys):
        grad_name = gradient_name(name)
        summed = raw("allreduce", dys, grad_name, process_set, op=ReduceOp.AVERAGE)
        rows = _first_dims(xs, grad_name, process_set)
        me = rank_ops.set_rank(process_set)
        starts = tf.reduce_sum(rows[:me], axis=0)
        return [s[starts[i]:starts[i] + rows[me, i]] for i, s in enumerate(summed)]

    return custom(lambda xs: raw("allgather", xs, name, process_set), gradient)(tensors)


def _first_dims(tensors, name, process_set=None) -> tf.Tensor:
    """Every rank's first dimension of each tensor: int32 [set size, len(tensors)]."""
    rows = tf.stack([tf.shape(t, out_type=tf.int32)[0] for t in tensors])[tf.newaxis]
    return raw("allgather", [rows], name + "/rows", process_set)[0]


# ---------------------------------------------------------------- broadcast
def broadcast(tensors, root_rank: int, name, process_set=None) -> List[tf.Tensor]:
    def gradient(dys, xs, ys):
        averaged = raw("allreduce", dys, gradient_name(name), process_set, op=ReduceOp.AVERAGE)
        if rank_ops.rank() == root_rank:
            return averaged
        # The zeros depend on the all-reduce, so that a TF1 graph runs it on this rank too.
        with tf.control_dependencies(averaged):
            return [tf.zeros_like(a) for a in averaged]

    return custom(lambda xs: raw("broadcast", xs, name, process_set, root_rank=root_rank), gradient)(tensors)


# ---------------------------------------------------------------- reducescatter
def reducescatter(tensors, op, name, prescale_factor=1.0, postscale_factor=1.0, process_set=None) -> List[tf.Tensor]:
    def forward(xs):
        return raw("reducescatter", xs, name, process_set, op=op, prescale_factor=prescale_factor,
                   postscale_factor=postscale_factor)

    def gradient(dys, xs, ys):
        if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
            raise BlinkflowError(f"no gradient for reducescatter with op {op.name}")
        if op is ReduceOp.SUM:
            dys = [dy * tf.cast(rank_ops.size(process_set), dy.dtype) for dy in dys]
        full = raw("allgather", dys, gradient_name(name), process_set)
        return [tf.reshape(f, tf.shape(x)) for f, x in zip(full, xs)]

    return custom(forward, gradient)(tensors)


# ---------------------------------------------------------------- alltoall
def alltoall(tensor, splits, name, process_set=None):
    """(output, rows received from each rank); ``splits`` int32 (empty: none given)."""
    def forward(xs):
        y, received = raw("alltoall", [xs[0], splits], name, process_set)
        return [y, tf.stop_gradient(received)]

    def gradient(dys, xs, ys):
        back, _ = raw("alltoall", [dys[0], ys[1]], gradient_name(name), process_set)
        return [tf.reshape(back, tf.shape(xs[0]))]

    y, received = custom(forward, gradient)([tensor])
    return y, received
