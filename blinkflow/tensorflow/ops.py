"""Collectives on tf.Tensor, tf.Variable and Keras variables, with Horovod's gradients.

Each op works eagerly, inside ``tf.function`` and in TF1-style graphs run by
``tf.compat.v1.Session``; a list crosses into the runtime in one call (:mod:`._bridge`) so a
grouped op is fused there. Signatures are Horovod's (``horovod/tensorflow/__init__.py``,
``mpi_ops.py``) with DESIGN §3.1's positional order: ``process_set=`` on every op, the deprecated
``average=`` (warned once, still working), and ``device_dense``/``device_sparse``/
``ignore_name_scope``, accepted for Horovod's callers: blinkflow places a collective where its
tensors live and uses names as given. Gradients (``tf.custom_gradient``, Horovod's):

- allreduce      -> allreduce of the gradient with the same op and scale factors
- allgather      -> gradient averaged over the set, sliced to this rank's rows
- broadcast      -> gradient averaged over the set on the root, zeros elsewhere
- reducescatter  -> allgather of the gradient, times the set's size for Sum (Horovod's scaling)
- alltoall       -> alltoall of the gradient back with the received splits

Unnamed calls get deterministic names (:mod:`._naming`); a gradient is named after its forward op.
A call is named before its arguments are checked, and a call these bindings refuse (an unknown
op, a scale factor that is not a number, splits that are not integers) still reaches the
runtime under that name (:func:`_refused`): every rank then raises the same
InvalidArgumentError naming the refusing rank, eagerly or when the graph runs, and no rank's
later collective pairs with another's earlier one. Empty groups are negotiated too.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import tensorflow as tf

from ..compression import Compression
from ..errors import BlinkflowError, NotSupportedError
from ..ops import ReduceOp, as_reduce_op
from ..runtime import arguments
from ..runtime.process_sets import set_id_of
from . import _bridge, _naming
from ._compat import to_tensor
from ._deprecated import op_from

# Library code runs as written inside tf.function: AutoGraph need not (and should not) rewrite it.
do_not_convert = tf.autograph.experimental.do_not_convert

Average = ReduceOp.AVERAGE


def size(process_set=None) -> int:
    """The number of ranks of ``process_set`` (default: the job)."""
    if process_set is None or set_id_of(process_set) == 0:
        return _bridge.runtime().size()
    return process_set.size()


def rank() -> int:
    return _bridge.runtime().rank()


def set_rank(process_set=None) -> int:
    """This rank's place in ``process_set`` (its rank in the job for the global set)."""
    if process_set is None or set_id_of(process_set) == 0:
        return rank()
    return process_set.rank()


def _set_id(process_set) -> int:
    try:
        return set_id_of(process_set)
    except BlinkflowError:
        return -1  # the runtime raises the error, when the call reaches it


def _refused(kind: str, name: str, error: Exception, tensors, process_set=None) -> List[tf.Tensor]:
    """A call refused here (before the runtime saw it) still goes to the runtime under ``name``,
    so every rank raises the same InvalidArgumentError; in a graph, when the step runs. The
    outputs mirror ``tensors`` (never produced: the call always fails) so the graph traces."""
    def run(_arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.refused_async(kind, name, error, process_set=process_set))  # raises

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


def _tensors(values) -> List[tf.Tensor]:
    return [to_tensor(t) for t in values]


def scaled(tensor: tf.Tensor, factor: float) -> tf.Tensor:
    """``tensor * factor`` with the runtime's (Horovod's) arithmetic: integers in float64,
    truncated toward zero; float16 in float32; other floats in their own precision."""
    if factor == 1.0:
        return tensor
    dtype = tensor.dtype
    if dtype.is_integer or dtype == tf.bool:
        return tf.cast(tf.cast(tensor, tf.float64) * factor, dtype)
    if dtype == tf.float16:
        return tf.cast(tf.cast(tensor, tf.float32) * np.float32(factor), dtype)
    return tensor * tf.cast(factor, dtype)


# ---------------------------------------------------------------- allreduce
@do_not_convert
def grouped_allreduce(tensors, op=None, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=None, average=None, device_dense="",
                      device_sparse="", ignore_name_scope=False) -> List:
    """All-reduce a list of tensors in one runtime call; differentiable. ``tf.IndexedSlices``
    members (embedding gradients) travel by all-gather of their values and indices, in one
    grouped call of their own, with the same op and scale factors (Average and Sum only)."""
    name = _naming.resolve(name, "grouped_allreduce", _set_id(process_set))
    tensors = list(tensors)
    try:
        op = op_from(op, average, "grouped_allreduce")
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
    except BlinkflowError as error:
        return _refused("allreduce", name, error, _tensors(t for t in tensors
                                                            if not isinstance(t, tf.IndexedSlices)), process_set)
    sparse_at = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse_at:
        return _grouped_with_slices(tensors, sparse_at, op, name, pre, post, compression, process_set)
    tensors = _tensors(tensors)
    if not tensors:  # negotiated all the same: a rank alone with [] must not return early
        return _grouped_allreduce_raw([], op, name, pre, post, process_set)
    sent, contexts = zip(*(compression.compress(t) for t in tensors))
    reduced = _grouped_allreduce_diff(list(sent), op, name, pre, post, process_set)
    return [compression.decompress(r, ctx) for r, ctx in zip(reduced, contexts)]


def _grouped_with_slices(tensors, sparse_at, op, name, pre, post, compression, process_set):
    out = list(tensors)
    slices = [tensors[i] for i in sparse_at]
    for i, reduced in zip(sparse_at, _allreduce_indexed_slices(slices, op, name + "/sparse", pre, post, process_set)):
        out[i] = reduced
    dense_at = [i for i in range(len(tensors)) if i not in sparse_at]
    if dense_at:
        dense = grouped_allreduce([tensors[i] for i in dense_at], op, name, pre, post, compression, process_set)
        for i, reduced in zip(dense_at, dense):
            out[i] = reduced
    return out


@do_not_convert
def allreduce(tensor, op=None, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none, process_set=None, average=None, device_dense="", device_sparse="",
              ignore_name_scope=False):
    """Reduce ``tensor`` over the ranks of ``process_set`` with ``op``; every rank gets the result.
    A ``tf.IndexedSlices`` is all-gathered (values and indices), scaled and, for Average,
    divided by the set's size; other ops than Average and Sum raise NotImplementedError."""
    name = _naming.resolve(name, "allreduce", _set_id(process_set))
    if average is not None:
        op = op_from(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices([tensor], Average if op is None else op, name, prescale_factor,
                                         postscale_factor, process_set)[0]
    return grouped_allreduce([tensor], op, name, prescale_factor, postscale_factor, compression, process_set)[0]


def _grouped_allreduce_raw(tensors, op, name, pre, post, process_set=None):
    def run(arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_allreduce_async(arrays, op=op, name=name, prescale_factor=pre,
                                                         postscale_factor=post, process_set=process_set))

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


def _grouped_allreduce_diff(tensors, op, name, pre, post, process_set=None):
    @tf.custom_gradient
    def forward(*xs):
        ys = _grouped_allreduce_raw(list(xs), op, name, pre, post, process_set)

        def grad(*dys):
            if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
                raise BlinkflowError(f"no gradient for allreduce with op {op.name}: only Average and Sum "
                                     "are differentiable")
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            return _grouped_allreduce_raw(list(dys), op, name + "/grad", pre, post, process_set)

        return ys, grad

    out = forward(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _allreduce_indexed_slices(slices, op, name, pre, post, process_set=None) -> List[tf.IndexedSlices]:
    """Sparse gradients travel as gathered (values, indices): the sum over ranks without densifying;
    scale factors apply to the values (Horovod's arithmetic); Average divides by the set's size."""
    try:
        op = as_reduce_op(op)
        if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
            raise NotSupportedError(f"allreduce of tf.IndexedSlices supports only Average and Sum, not {op.name} "
                                    "(as Horovod); densify with tf.convert_to_tensor, or sparse_as_dense=True")
        pre = arguments.scale_factor(pre, "prescale")
        post = arguments.scale_factor(post, "postscale")
    except BlinkflowError as error:
        if isinstance(error, NotSupportedError) and tf.executing_eagerly():
            # Every rank hears of this rank's refusal under the call's name (no rank waits for it),
            # then this rank raises Horovod's NotImplementedError. In a graph it raises while
            # tracing, as Horovod's does.
            try:
                _refused("allgather", name, error, [s.values for s in slices] + [s.indices for s in slices],
                         process_set)
            except BlinkflowError:
                pass
        if isinstance(error, NotSupportedError):
            raise error
        gathered = _refused("allgather", name, error, [s.values for s in slices] + [s.indices for s in slices],
                            process_set)
        return [tf.IndexedSlices(v, i, dense_shape=s.dense_shape)
                for v, i, s in zip(gathered[:len(slices)], gathered[len(slices):], slices)]
    values = [scaled(s.values, pre) for s in slices]
    gathered = grouped_allgather(values + [s.indices for s in slices], name=name, process_set=process_set)
    out = []
    for k, s in enumerate(slices):
        v = gathered[k]
        if op is ReduceOp.AVERAGE:
            v = averaged(v, size(process_set), post)
        else:
            v = scaled(v, post)
        out.append(tf.IndexedSlices(v, gathered[len(slices) + k], dense_shape=s.dense_shape))
    return out


def averaged(summed: tf.Tensor, n: int, post: float) -> tf.Tensor:
    """The runtime's Average of a sum over ``n`` ranks, then ``post``: floats scaled by post / n;
    integers divided exactly (truncated toward zero), or in float64 with a postscale."""
    if summed.dtype.is_floating:
        return scaled(summed, post / n)
    if post == 1.0:
        return tf.math.truncatediv(summed, tf.cast(n, summed.dtype))
    return tf.cast(tf.cast(summed, tf.float64) * post / n, summed.dtype)


# ---------------------------------------------------------------- allgather
def _grouped_allgather_raw(tensors, name, process_set=None):
    def run(arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_allgather_async(arrays, name=name, process_set=process_set))

    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape for t in tensors]
    return _bridge.call(run, tensors, [t.dtype for t in tensors], shapes, name)


def _first_dims(tensors, name, process_set=None):
    """Every rank's first dimension of each tensor: int32 [set size, len(tensors)]."""
    rows = tf.stack([tf.shape(t, out_type=tf.int32)[0] for t in tensors])[tf.newaxis]
    return _grouped_allgather_raw([rows], name + "/rows", process_set)[0]


@do_not_convert
def grouped_allgather(tensors, name: Optional[str] = None, process_set=None, ignore_name_scope=False) -> List:
    """Concatenate each tensor over the set's ranks along its first dimension (may differ per rank)."""
    name = _naming.resolve(name, "grouped_allgather", _set_id(process_set))
    tensors = _tensors(tensors)
    if not tensors:  # negotiated all the same: a rank alone with [] must not return early
        return _grouped_allgather_raw([], name, process_set)

    @tf.custom_gradient
    def forward(*xs):
        ys = _grouped_allgather_raw(list(xs), name, process_set)

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            summed = _grouped_allreduce_raw(list(dys), ReduceOp.AVERAGE, name + "/grad", 1.0, 1.0, process_set)
            rows = _first_dims(list(xs), name + "/grad", process_set)
            me = set_rank(process_set)
            starts = tf.reduce_sum(rows[:me], axis=0)
            return [s[starts[i]:starts[i] + rows[me, i]] for i, s in enumerate(summed)]

        return ys, grad

    out = forward(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


@do_not_convert
def allgather(tensor, name: Optional[str] = None, process_set=None, ignore_name_scope=False, device_dense=""):
    return grouped_allgather([tensor], name=_naming.resolve(name, "allgather", _set_id(process_set)),
                             process_set=process_set)[0]


# ---------------------------------------------------------------- broadcast
def _broadcast_raw(tensors, root_rank, name, process_set=None):
    def run(arrays):  # one request for the whole list: a rank with another count fails everywhere
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_broadcast_async(arrays, root_rank, name=name, process_set=process_set))

    return _bridge.call(run, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], name)


@do_not_convert
def grouped_broadcast(tensors, root_rank: int, name: Optional[str] = None, process_set=None) -> List[tf.Tensor]:
    """Every rank gets ``root_rank``'s tensors (a global rank, also in a process set; one runtime
    call for the list); differentiable."""
    name = _naming.resolve(name, "broadcast", _set_id(process_set))
    tensors = _tensors(tensors)
    if not tensors:  # negotiated all the same: a rank alone with [] must not return early
        return _broadcast_raw([], root_rank, name, process_set)

    @tf.custom_gradient
    def forward(*xs):
        ys = _broadcast_raw(list(xs), root_rank, name, process_set)

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            averaged = _grouped_allreduce_raw(list(dys), ReduceOp.AVERAGE, name + "/grad", 1.0, 1.0, process_set)
            if rank() != root_rank:
                return [tf.zeros_like(a) for a in averaged]
            return averaged

        return ys, grad

    out = forward(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


@do_not_convert
def broadcast(tensor, root_rank: int, name: Optional[str] = None, process_set=None, ignore_name_scope=False,
              device_dense=""):
    return grouped_broadcast([tensor], root_rank, name=name, process_set=process_set)[0]


@do_not_convert
def broadcast_(variables, root_rank: int, name: Optional[str] = None, process_set=None):
    """Horovod's in-place broadcast: every rank's ``variables`` take ``root_rank``'s values (one
    runtime call for the list); returns the new values. In a TF1 graph the returned tensors
    carry the assignments: run them."""
    variables = list(variables)
    values = grouped_broadcast([tf.convert_to_tensor(v) for v in variables], root_rank,
                               name=_naming.resolve(name, "broadcast_", _set_id(process_set)), process_set=process_set)
    if tf.executing_eagerly() or tf.compat.v1.get_default_graph().building_function:
        for variable, value in zip(variables, values):
            variable.assign(value)
        return [tf.convert_to_tensor(v) for v in variables]
    assigned = [variable.assign(value) for variable, value in zip(variables, values)]
    with tf.control_dependencies([tf.group(*assigned)]):
        return [tf.identity(value) for value in values]


# ---------------------------------------------------------------- reducescatter
def _reducescatter_raw(tensors, op, name, pre, post, process_set=None):
    def run(arrays):
        rt = _bridge.runtime()
        return rt.synchronize(rt.grouped_reducescatter_async(arrays, op=op, name=name, prescale_factor=pre,
                                                             postscale_factor=post, process_set=process_set))

    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape for t in tensors]
    return _bridge.call(run, tensors, [t.dtype for t in tensors], shapes, name)


@do_not_convert
def grouped_reducescatter(tensors, op=Average, name: Optional[str] = None, prescale_factor=1.0,
                          postscale_factor=1.0, compression=Compression.none, process_set=None, device_dense="",
                          ignore_name_scope=False) -> List[tf.Tensor]:
    """Reduce-scatter each tensor over the set's ranks in one runtime call (one request): rank i
    of the set keeps block i of each first dimension (the first ``n % size`` ranks one row
    more). Differentiable with Horovod's scaling: the gradient is the all-gathered output
    gradient, times the set's size for Sum."""
    name = _naming.resolve(name, "grouped_reducescatter", _set_id(process_set))
    tensors = _tensors(tensors)
    try:
        op = as_reduce_op(op)
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
    except BlinkflowError as error:
        return _refused("reducescatter", name, error, tensors, process_set)
    if not tensors:
        return _reducescatter_raw([], op, name, pre, post, process_set)
    sent, contexts = zip(*(compression.compress(t) for t in tensors))

    @tf.custom_gradient
    def forward(*xs):
        ys = _reducescatter_raw(list(xs), op, name, pre, post, process_set)

        def grad(*dys):
            if op not in (ReduceOp.AVERAGE, ReduceOp.SUM):
                raise BlinkflowError(f"no gradient for reducescatter with op {op.name}")
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            if op is ReduceOp.SUM:
                dys = [dy * tf.cast(size(process_set), dy.dtype) for dy in dys]
            full = _grouped_allgather_raw(dys, name + "/grad", process_set)
            return [tf.reshape(f, tf.shape(x)) for f, x in zip(full, xs)]

        return ys, grad

    out = forward(*sent)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    return [compression.decompress(r, ctx) for r, ctx in zip(out, contexts)]


@do_not_convert
def reducescatter(tensor, op=Average, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
                  compression=Compression.none, process_set=None, device_dense="", ignore_name_scope=False):
    """Reduce over the set's ranks; this rank keeps its block of rows (the first ``n % size`` one more)."""
    return grouped_reducescatter([tensor], op, _naming.resolve(name, "reducescatter", _set_id(process_set)),
                                 prescale_factor, postscale_factor, compression, process_set)[0]


# ---------------------------------------------------------------- alltoall
def _alltoall_raw(tensor, splits, name, process_set=None):
    def run(arrays):  # the runtime checks the splits (integers, one per rank, summing to the rows)
        rt = _bridge.runtime()
        if arrays[1].size == 0:  # none given: even blocks, or every rank's InvalidArgumentError
            out = rt.synchronize(rt.alltoall_async(arrays[0], name=name, process_set=process_set))
            return [out, np.asarray(_even_received(arrays[0], process_set), dtype=np.int32)]
        out, received = rt.synchronize(rt.alltoall_async(arrays[0], splits=arrays[1], name=name,
                                                         process_set=process_set))
        return [out, np.asarray(received, dtype=np.int32)]

    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:])
    return _bridge.call(run, [tensor, splits], [tensor.dtype, tf.int32], [shape, tf.TensorShape([None])], name)


def _even_received(array, process_set):
    """Rows received from each rank when no splits were given (equal blocks everywhere)."""
    n = size(process_set)
    return [array.shape[0] // n] * n


def _splits(splits) -> tf.Tensor:
    """Integer splits as int32; others travel as float64 for the runtime to refuse on every rank
    (a cast would silently truncate 2.7 to 2). None: an empty tensor, "no splits given"."""
    if splits is None:
        return tf.constant([], tf.int32)
    splits = tf.convert_to_tensor(splits)
    return tf.cast(splits, tf.int32 if splits.dtype.is_integer else tf.float64)


@do_not_convert
def alltoall(tensor, splits=None, name: Optional[str] = None, process_set=None, ignore_name_scope=False):
    """Send rows ``splits[i]`` to rank i of the set, receive theirs; ``(output, received_splits)``
    with splits. Without splits the first dimension must divide evenly by the set's size
    (InvalidArgumentError on every rank otherwise, as Horovod)."""
    name = _naming.resolve(name, "alltoall", _set_id(process_set))
    tensor = to_tensor(tensor)
    given = splits is not None
    splits_t = _splits(splits)

    @tf.custom_gradient
    def forward(x):
        y, received = _alltoall_raw(x, splits_t, name, process_set)

        def grad(dy, _unused=None):
            back, _ = _alltoall_raw(dy, received, name + "/grad", process_set)
            return tf.reshape(back, tf.shape(x))

        return (y, tf.stop_gradient(received)), grad

    out, received = forward(tensor)
    return (out, received) if given else out
