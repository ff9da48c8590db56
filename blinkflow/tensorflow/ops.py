"""Collectives on tf.Tensor, tf.Variable and Keras variables, with Horovod's gradients.

Each op works eagerly and inside ``tf.function``; a list crosses into the runtime in one call
(:mod:`._bridge`) so a grouped op is fused there. Gradients (``tf.custom_gradient``):

- allreduce      -> allreduce of the gradient with the same op and scale factors
- allgather      -> gradient averaged over ranks, sliced to this rank's rows
- broadcast      -> gradient averaged over ranks on the root, zeros elsewhere
- reducescatter  -> allgather of the gradient (divided by size for Average)
- alltoall       -> alltoall of the gradient back with the received splits

Unnamed calls get deterministic names (:mod:`._naming`); a gradient is named after its forward op.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..compression import Compression
from ..errors import BlinkflowError
from ..ops import ReduceOp, as_reduce_op
from . import _bridge, _naming
from ._compat import to_tensor

# Library code runs as written inside tf.function: AutoGraph need not (and should not) rewrite it.
do_not_convert = tf.autograph.experimental.do_not_convert

Average = ReduceOp.AVERAGE


def size() -> int:
    return _bridge.runtime().size()


def rank() -> int:
    return _bridge.runtime().rank()


# ---------------------------------------------------------------- allreduce
@do_not_convert
def grouped_allreduce(tensors, op=Average, name: Optional[str] = None, prescale_factor=1.0,
                      postscale_factor=1.0, compression=Compression.none) -> List[tf.Tensor]:
    """All-reduce a list of tensors in one runtime call; differentiable."""
    op = as_reduce_op(op)
    name = _naming.resolve(name, "grouped_allreduce")
    tensors = [to_tensor(t) for t in tensors]
    if not tensors:
        return []
    sent, contexts = zip(*(compression.compress(t) for t in tensors))
    reduced = _grouped_allreduce_diff(list(sent), op, name, float(prescale_factor), float(postscale_factor))
    return [compression.decompress(r, ctx) for r, ctx in zip(reduced, contexts)]


@do_not_convert
def allreduce(tensor, op=Average, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none) -> tf.Tensor:
    """Reduce ``tensor`` over all ranks with ``op``; every rank gets the result."""
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, _naming.resolve(name, "allreduce"))
    name = _naming.resolve(name, "allreduce")
    return grouped_allreduce([tensor], op, name, prescale_factor, postscale_factor, compression)[0]


def _grouped_allreduce_raw(tensors, op, name, pre, post):
    def run(arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_allreduce_async(arrays, op=op, name=name, prescale_factor=pre,
                                                         postscale_factor=post))

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


def _grouped_allreduce_diff(tensors, op, name, pre, post):
    @tf.custom_gradient
    def forward(*xs):
        ys = _grouped_allreduce_raw(list(xs), op, name, pre, post)

        def grad(*dys):
            if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
                raise BlinkflowError(f"no gradient for allreduce with op {op.name}: only Average and Sum "
                                     "are differentiable")
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            return _grouped_allreduce_raw(list(dys), op, name + "/grad", pre, post)

        return ys, grad

    out = forward(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _allreduce_indexed_slices(slices: tf.IndexedSlices, op, name) -> tf.IndexedSlices:
    """Sparse gradients travel as gathered (values, indices): the sum over ranks without densifying."""
    op = as_reduce_op(op)
    if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
        raise BlinkflowError(f"IndexedSlices support only Average and Sum, not {op.name}; "
                             "use sparse_as_dense=True")
    values, indices = grouped_allgather([slices.values, slices.indices], name=name)
    if op is ReduceOp.AVERAGE:
        values = values / tf.cast(size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


# ---------------------------------------------------------------- allgather
def _grouped_allgather_raw(tensors, name):
    def run(arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_allgather_async(arrays, name=name))

    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape for t in tensors]
    return _bridge.call(run, tensors, [t.dtype for t in tensors], shapes, name)


def _first_dims(tensors, name):
    """Every rank's first dimension of each tensor: int32 [size, len(tensors)]."""
    rows = tf.stack([tf.shape(t, out_type=tf.int32)[0] for t in tensors])[tf.newaxis]
    return _grouped_allgather_raw([rows], name + "/rows")[0]


@do_not_convert
def grouped_allgather(tensors, name: Optional[str] = None) -> List[tf.Tensor]:
    """Concatenate each tensor over ranks along its first dimension (may differ per rank)."""
    name = _naming.resolve(name, "grouped_allgather")
    tensors = [to_tensor(t) for t in tensors]
    if not tensors:
        return []

    @tf.custom_gradient
    def forward(*xs):
        ys = _grouped_allgather_raw(list(xs), name)

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            summed = _grouped_allreduce_raw(list(dys), ReduceOp.AVERAGE, name + "/grad", 1.0, 1.0)
            rows = _first_dims(list(xs), name + "/grad")
            me = rank()
            starts = tf.reduce_sum(rows[:me], axis=0)
            return [s[starts[i]:starts[i] + rows[me, i]] for i, s in enumerate(summed)]

        return ys, grad

    out = forward(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


@do_not_convert
def allgather(tensor, name: Optional[str] = None) -> tf.Tensor:
    return grouped_allgather([tensor], name=_naming.resolve(name, "allgather"))[0]


# ---------------------------------------------------------------- broadcast
def _broadcast_raw(tensors, root_rank, name):
    def run(arrays):
        rt = _bridge.runtime()
        handles = [rt.broadcast_async(a, root_rank, name=f"{name}.{i}") for i, a in enumerate(arrays)]
        return [rt.synchronize(h) for h in handles]

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


@do_not_convert
def grouped_broadcast(tensors, root_rank: int, name: Optional[str] = None) -> List[tf.Tensor]:
    """Every rank gets ``root_rank``'s tensors (one runtime call for the list); differentiable."""
    name = _naming.resolve(name, "broadcast")
    tensors = [to_tensor(t) for t in tensors]
    if not tensors:
        return []

    @tf.custom_gradient
    def forward(*xs):
        ys = _broadcast_raw(list(xs), root_rank, name)

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            averaged = _grouped_allreduce_raw(list(dys), ReduceOp.AVERAGE, name + "/grad", 1.0, 1.0)
            if rank() != root_rank:
                return [tf.zeros_like(a) for a in averaged]
            return averaged

        return ys, grad

    out = forward(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


@do_not_convert
def broadcast(tensor, root_rank: int, name: Optional[str] = None) -> tf.Tensor:
    return grouped_broadcast([tensor], root_rank, name=name)[0]


# ---------------------------------------------------------------- reducescatter
def _reducescatter_raw(tensor, op, name):
    def run(arrays):
        rt = _bridge.runtime()
        return [rt.synchronize(rt.reducescatter_async(arrays[0], op=op, name=name))]

    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:])
    return _bridge.call(run, [tensor], [tensor.dtype], [shape], name)[0]


@do_not_convert
def reducescatter(tensor, op=Average, name: Optional[str] = None) -> tf.Tensor:
    """Reduce over ranks; this rank keeps its block of rows (the first ``n % size`` ranks one more)."""
    op = as_reduce_op(op)
    name = _naming.resolve(name, "reducescatter")

    @tf.custom_gradient
    def forward(x):
        y = _reducescatter_raw(x, op, name)

        def grad(dy):
            if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
                raise BlinkflowError(f"no gradient for reducescatter with op {op.name}")
            full = _grouped_allgather_raw([dy], name + "/grad")[0]
            if op is ReduceOp.AVERAGE:
                full = full / tf.cast(size(), full.dtype)
            return tf.reshape(full, tf.shape(x))

        return y, grad

    return forward(to_tensor(tensor))


# ---------------------------------------------------------------- alltoall
def _alltoall_raw(tensor, splits, name):
    def run(arrays):
        rt = _bridge.runtime()
        out, received = rt.synchronize(rt.alltoall_async(arrays[0], splits=arrays[1], name=name))
        return [out, np.asarray(received, dtype=np.int32)]

    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:])
    return _bridge.call(run, [tensor, splits], [tensor.dtype, tf.int32], [shape, tf.TensorShape([None])], name)


def _even_splits(tensor):
    """Splits when none are given: equal blocks, the first ``n % size`` ranks one more row."""
    n, s = tf.shape(tensor, out_type=tf.int32)[0], size()
    return n // s + tf.cast(tf.range(s) < n % s, tf.int32)


@do_not_convert
def alltoall(tensor, splits=None, name: Optional[str] = None):
    """Send rows ``splits[i]`` to rank i, receive theirs; ``(output, received_splits)`` with splits."""
    name = _naming.resolve(name, "alltoall")
    tensor = to_tensor(tensor)
    given = splits is not None
    splits_t = tf.cast(splits, tf.int32) if given else _even_splits(tensor)

    @tf.custom_gradient
    def forward(x):
        y, received = _alltoall_raw(x, splits_t, name)

        def grad(dy, _unused=None):
            back, _ = _alltoall_raw(dy, received, name + "/grad")
            return tf.reshape(back, tf.shape(x))

        return (y, tf.stop_gradient(received)), grad

    out, received = forward(tensor)
    return (out, received) if given else out
