"""Collectives on tf.Tensor, tf.Variable and Keras variables, with Horovod's gradients.

Each op works eagerly and inside ``tf.function``; a list crosses into the runtime in one call
(:mod:`._bridge`) so a grouped op is fused there. Gradients (``tf.custom_gradient``):

- allreduce      -> allreduce of the gradient with the same op and scale factors
- allgather      -> gradient averaged over ranks, sliced to this rank's rows
- broadcast      -> gradient averaged over ranks on the root, zeros elsewhere
- reducescatter  -> allgather of the gradient (divided by size for Average)
- alltoall       -> alltoall of the gradient back with the received splits

Unnamed calls get deterministic names (:mod:`._naming`); a gradient is named after its forward op.
A call is named before its arguments are checked, and a call these bindings refuse (an unknown
op, a scale factor that is not a number, splits that are not integers) still reaches the
runtime under that name (:func:`_refused`): every rank then raises the same
InvalidArgumentError naming the refusing rank, eagerly or when the graph runs, and no rank's
later collective pairs with another's earlier one. Empty groups are negotiated too.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..compression import Compression
from ..errors import BlinkflowError, InvalidArgumentError
from ..ops import ReduceOp, as_reduce_op
from ..runtime import arguments
from . import _bridge, _naming
from ._compat import to_tensor

# Library code runs as written inside tf.function: AutoGraph need not (and should not) rewrite it.
do_not_convert = tf.autograph.experimental.do_not_convert

Average = ReduceOp.AVERAGE


def size() -> int:
    return _bridge.runtime().size()


def rank() -> int:
    return _bridge.runtime().rank()


def _refused(kind: str, name: str, error: Exception, tensors) -> List[tf.Tensor]:
    """A call refused here (before the runtime saw it) still goes to the runtime under ``name``,
    so every rank raises the same InvalidArgumentError; in a graph, when the step runs. The
    outputs mirror ``tensors`` (never produced: the call always fails) so the graph traces."""
    def run(_arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.refused_async(kind, name, error))  # raises

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


def _tensors(values) -> List[tf.Tensor]:
    return [to_tensor(t) for t in values]


# ---------------------------------------------------------------- allreduce
@do_not_convert
def grouped_allreduce(tensors, op=Average, name: Optional[str] = None, prescale_factor=1.0,
                      postscale_factor=1.0, compression=Compression.none) -> List[tf.Tensor]:
    """All-reduce a list of tensors in one runtime call; differentiable."""
    name = _naming.resolve(name, "grouped_allreduce")
    tensors = _tensors(tensors)
    try:
        op = as_reduce_op(op)
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
    except BlinkflowError as error:
        return _refused("allreduce", name, error, tensors)
    if not tensors:  # negotiated all the same: a rank alone with [] must not return early
        return _grouped_allreduce_raw([], op, name, pre, post)
    sent, contexts = zip(*(compression.compress(t) for t in tensors))
    reduced = _grouped_allreduce_diff(list(sent), op, name, pre, post)
    return [compression.decompress(r, ctx) for r, ctx in zip(reduced, contexts)]


@do_not_convert
def allreduce(tensor, op=Average, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none) -> tf.Tensor:
    """Reduce ``tensor`` over all ranks with ``op``; every rank gets the result."""
    name = _naming.resolve(name, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, name)
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
    try:
        op = as_reduce_op(op)
        if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
            raise InvalidArgumentError(f"IndexedSlices support only Average and Sum, not {op.name}; use "
                                       "sparse_as_dense=True")
    except BlinkflowError as error:
        values, indices = _refused("allgather", name, error, [slices.values, slices.indices])
        return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)
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
    tensors = _tensors(tensors)
    if not tensors:  # negotiated all the same: a rank alone with [] must not return early
        return _grouped_allgather_raw([], name)

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
    def run(arrays):  # one request for the whole list: a rank with another count fails everywhere
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_broadcast_async(arrays, root_rank, name=name))

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


@do_not_convert
def grouped_broadcast(tensors, root_rank: int, name: Optional[str] = None) -> List[tf.Tensor]:
    """Every rank gets ``root_rank``'s tensors (one runtime call for the list); differentiable."""
    name = _naming.resolve(name, "broadcast")
    tensors = _tensors(tensors)
    if not tensors:  # negotiated all the same: a rank alone with [] must not return early
        return _broadcast_raw([], root_rank, name)

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
    name = _naming.resolve(name, "reducescatter")
    try:
        op = as_reduce_op(op)
    except BlinkflowError as error:
        return _refused("reducescatter", name, error, [to_tensor(tensor)])[0]

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
    def run(arrays):  # the runtime checks the splits (integers, one per rank, summing to the rows)
        rt = _bridge.runtime()
        out, received = rt.synchronize(rt.alltoall_async(arrays[0], splits=arrays[1], name=name))
        return [out, np.asarray(received, dtype=np.int32)]

    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:])
    return _bridge.call(run, [tensor, splits], [tensor.dtype, tf.int32], [shape, tf.TensorShape([None])], name)


def _splits(splits) -> tf.Tensor:
    """Integer splits as int32; others travel as float64 for the runtime to refuse on every rank
    (a cast would silently truncate 2.7 to 2)."""
    splits = tf.convert_to_tensor(splits)
    return tf.cast(splits, tf.int32 if splits.dtype.is_integer else tf.float64)


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
    splits_t = _splits(splits) if given else _even_splits(tensor)

    @tf.custom_gradient
    def forward(x):
        y, received = _alltoall_raw(x, splits_t, name)

        def grad(dy, _unused=None):
            back, _ = _alltoall_raw(dy, received, name + "/grad")
            return tf.reshape(back, tf.shape(x))

        return (y, tf.stop_gradient(received)), grad

    out, received = forward(tensor)
    return (out, received) if given else out
