"""Collectives on tf.Tensor, tf.Variable and Keras variables, with Horovod's gradients.

Each op works eagerly, inside ``tf.function`` and in TF1-style graphs run by
``tf.compat.v1.Session``; a list crosses into the runtime in one request (:mod:`.raw_ops`) so
a grouped op is fused there; the gradients are :mod:`.differentiable`'s and ``tf.IndexedSlices``
are reduced by :mod:`.sparse`. Signatures are Horovod's (``horovod/tensorflow/__init__.py``,
``mpi_ops.py``), in the positional order of ``blinkflow``'s own API: ``process_set=`` on every
op, the deprecated ``average=`` (warned once, still working), and ``device_dense``/
``device_sparse``/``ignore_name_scope``, accepted for Horovod's callers: blinkflow places a
collective where its tensors live and uses names as given.

Unnamed calls get deterministic names (:mod:`._naming`). A call is named before its arguments
are checked, and a call these bindings refuse (an unknown op, a scale factor that is not a
number, splits that are not integers) still reaches the runtime under that name
(:func:`.raw_ops.refuse`): every rank then raises the same InvalidArgumentError naming the
refusing rank, eagerly or when the graph runs, and no rank's later collective pairs with
another's earlier one. Empty groups are negotiated too: a rank alone with ``[]`` must not return
early.
"""
from __future__ import annotations

from typing import List, Optional

import tensorflow as tf

from ..compression import Compression
from ..errors import BlinkflowError
from ..ops import ReduceOp, as_reduce_op
from ..runtime import arguments
from . import _naming, differentiable, sparse
from ._compat import is_tf_object, to_tensor
from ._deprecated import op_from
from .raw_ops import raw, refuse
from .rank_ops import set_id

# Library code runs as written inside tf.function: AutoGraph need not (and should not) rewrite it.
do_not_convert = tf.autograph.experimental.do_not_convert

Average = ReduceOp.AVERAGE


def accepts(value) -> bool:
    """Whether ``value`` is this binding's: a tf.Tensor, tf.Variable, IndexedSlices or Keras variable."""
    return is_tf_object(value)


def _tensors(values) -> List[tf.Tensor]:
    return [to_tensor(t) for t in values]


def _compressed(compression, tensors, collective) -> List[tf.Tensor]:
    """``collective`` of ``tensors`` as ``compression`` sends them, restored afterwards."""
    sent, contexts = zip(*(compression.compress(t) for t in tensors))
    return [compression.decompress(r, ctx) for r, ctx in zip(collective(list(sent)), contexts)]


# ---------------------------------------------------------------- allreduce
@do_not_convert
def grouped_allreduce(tensors, op=None, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=None, average=None, device_dense="",
                      device_sparse="", ignore_name_scope=False) -> List:
    """All-reduce a list of tensors in one runtime call; differentiable. ``tf.IndexedSlices``
    members (embedding gradients) travel by all-gather of their values and indices, in one
    grouped call of their own, with the same op and scale factors (Average and Sum only)."""
    name = _naming.resolve(name, "grouped_allreduce", set_id(process_set))
    tensors = list(tensors)
    try:
        op = op_from(op, average, "grouped_allreduce")
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
    except BlinkflowError as error:
        return refuse("allreduce", name, error, _tensors(t for t in tensors if not isinstance(t, tf.IndexedSlices)),
                      process_set)
    sparse_at = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse_at:
        return _grouped_with_slices(tensors, sparse_at, op, name, pre, post, compression, process_set)
    tensors = _tensors(tensors)
    if not tensors:
        return raw("allreduce", [], name, process_set, op=op, prescale_factor=pre, postscale_factor=post)
    return _compressed(compression, tensors,
                       lambda sent: differentiable.allreduce(sent, op, name, pre, post, process_set))


def _grouped_with_slices(tensors, sparse_at, op, name, pre, post, compression, process_set):
    out = list(tensors)
    slices = [tensors[i] for i in sparse_at]
    for i, reduced in zip(sparse_at, sparse.allreduce_slices(slices, op, name + "/sparse", pre, post, process_set)):
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
    name = _naming.resolve(name, "allreduce", set_id(process_set))
    if average is not None:
        op = op_from(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return sparse.allreduce_slices([tensor], Average if op is None else op, name, prescale_factor,
                                       postscale_factor, process_set)[0]
    return grouped_allreduce([tensor], op, name, prescale_factor, postscale_factor, compression, process_set)[0]


# ---------------------------------------------------------------- allgather
@do_not_convert
def grouped_allgather(tensors, name: Optional[str] = None, process_set=None, ignore_name_scope=False) -> List:
    """Concatenate each tensor over the set's ranks along its first dimension (may differ per rank)."""
    name = _naming.resolve(name, "grouped_allgather", set_id(process_set))
    tensors = _tensors(tensors)
    if not tensors:
        return raw("allgather", [], name, process_set)
    return differentiable.allgather(tensors, name, process_set)


@do_not_convert
def allgather(tensor, name: Optional[str] = None, process_set=None, ignore_name_scope=False, device_dense=""):
    return grouped_allgather([tensor], name=_naming.resolve(name, "allgather", set_id(process_set)),
                             process_set=process_set)[0]


# ---------------------------------------------------------------- broadcast
@do_not_convert
def grouped_broadcast(tensors, root_rank: int, name: Optional[str] = None, process_set=None) -> List[tf.Tensor]:
    """Every rank gets ``root_rank``'s tensors (a global rank, also in a process set; one runtime
    call for the list); differentiable."""
    name = _naming.resolve(name, "broadcast", set_id(process_set))
    tensors = _tensors(tensors)
    if not tensors:
        return raw("broadcast", [], name, process_set, root_rank=root_rank)
    return differentiable.broadcast(tensors, root_rank, name, process_set)


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
                               name=_naming.resolve(name, "broadcast_", set_id(process_set)), process_set=process_set)
    if tf.executing_eagerly() or tf.compat.v1.get_default_graph().building_function:
        for variable, value in zip(variables, values):
            variable.assign(value)
        return [tf.convert_to_tensor(v) for v in variables]
    assigned = [variable.assign(value) for variable, value in zip(variables, values)]
    with tf.control_dependencies([tf.group(*assigned)]):
        return [tf.identity(value) for value in values]


# ---------------------------------------------------------------- reducescatter
@do_not_convert
def grouped_reducescatter(tensors, op=Average, name: Optional[str] = None, prescale_factor=1.0,
                          postscale_factor=1.0, compression=Compression.none, process_set=None, device_dense="",
                          ignore_name_scope=False) -> List[tf.Tensor]:
    """Reduce-scatter each tensor over the set's ranks in one runtime call (one request): rank i
    of the set keeps block i of each first dimension (the first ``n % size`` ranks one row
    more). Differentiable with Horovod's scaling: the gradient is the all-gathered output
    gradient, times the set's size for Sum."""
    name = _naming.resolve(name, "grouped_reducescatter", set_id(process_set))
    tensors = _tensors(tensors)
    try:
        op = as_reduce_op(op)
        pre = arguments.scale_factor(prescale_factor, "prescale")
        post = arguments.scale_factor(postscale_factor, "postscale")
    except BlinkflowError as error:
        return refuse("reducescatter", name, error, tensors, process_set)
    if not tensors:
        return raw("reducescatter", [], name, process_set, op=op, prescale_factor=pre, postscale_factor=post)
    return _compressed(compression, tensors,
                       lambda sent: differentiable.reducescatter(sent, op, name, pre, post, process_set))


@do_not_convert
def reducescatter(tensor, op=Average, name: Optional[str] = None, prescale_factor=1.0, postscale_factor=1.0,
                  compression=Compression.none, process_set=None, device_dense="", ignore_name_scope=False):
    """Reduce over the set's ranks; this rank keeps its block of rows (the first ``n % size`` one more)."""
    return grouped_reducescatter([tensor], op, _naming.resolve(name, "reducescatter", set_id(process_set)),
                                 prescale_factor, postscale_factor, compression, process_set)[0]


# ---------------------------------------------------------------- alltoall
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
    name = _naming.resolve(name, "alltoall", set_id(process_set))
    out, received = differentiable.alltoall(to_tensor(tensor), _splits(splits), name, process_set)
    return (out, received) if splits is not None else out
