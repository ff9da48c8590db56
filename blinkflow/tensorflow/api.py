"""``hvd.allreduce`` & co. as ``blinkflow.tensorflow`` serves them: Horovod's keyword arguments
(``average=``, ``device_dense=``, ``process_set=``, ...) and Horovod's positional order, for
TF tensors (:mod:`.ops`, differentiable, eager, ``tf.function`` and TF1 graphs) and for numpy
arrays (the runtime). An empty list is a TensorFlow call: inside a graph it must run with the
graph, as the other ranks' non-empty calls do.
"""
from __future__ import annotations

from ..compression import Compression
from ..ops import Average
from . import crossing, ops
from ._compat import is_tf_object
from ._deprecated import op_from


def _tf(value) -> bool:
    return is_tf_object(value)


def _group_is_tf(tensors) -> bool:
    return not tensors or _tf(tensors[0])


def _op(op, average, where):
    """Horovod's ``average=`` mapped to an op (warned once); otherwise ``op`` unchecked (the
    runtime refuses a bad one on every rank), None meaning Average."""
    if average is not None:
        return op_from(op, average, where)
    return Average if op is None else op


def allreduce(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0, compression=Compression.none,
              process_set=None, average=None, device_dense="", device_sparse="", ignore_name_scope=False):
    """Reduce ``tensor`` over the ranks of ``process_set`` (default: all) with ``op`` (Average)."""
    if _tf(tensor):
        return ops.allreduce(tensor, op, name, prescale_factor, postscale_factor, compression, process_set,
                             average=average)
    return crossing.runtime().allreduce(tensor, _op(op, average, "allreduce"), name, prescale_factor, postscale_factor,
                                       compression, process_set)


def grouped_allreduce(tensors, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=None, average=None, device_dense="",
                      device_sparse="", ignore_name_scope=False):
    """All-reduce a list of tensors in one fused call; ``tf.IndexedSlices`` members may be mixed in."""
    tensors = list(tensors)
    if _group_is_tf(tensors):
        return ops.grouped_allreduce(tensors, op, name, prescale_factor, postscale_factor, compression, process_set,
                                     average=average)
    return crossing.runtime().grouped_allreduce(tensors, _op(op, average, "grouped_allreduce"), name, prescale_factor,
                                               postscale_factor, compression, process_set)


def allgather(tensor, name=None, process_set=None, ignore_name_scope=False, device_dense=""):
    if _tf(tensor):
        return ops.allgather(tensor, name, process_set)
    return crossing.runtime().allgather(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=None, ignore_name_scope=False):
    tensors = list(tensors)
    if _group_is_tf(tensors):
        return ops.grouped_allgather(tensors, name, process_set)
    return crossing.runtime().grouped_allgather(tensors, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=None, ignore_name_scope=False, device_dense=""):
    if _tf(tensor):
        return ops.broadcast(tensor, root_rank, name, process_set)
    return crossing.runtime().broadcast(tensor, root_rank, name, process_set)


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                  compression=Compression.none, process_set=None, device_dense="", ignore_name_scope=False):
    if _tf(tensor):
        return ops.reducescatter(tensor, op, name, prescale_factor, postscale_factor, compression, process_set)
    return crossing.runtime().reducescatter(tensor, op, name, prescale_factor, postscale_factor, process_set)


def grouped_reducescatter(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                          compression=Compression.none, process_set=None, device_dense="", ignore_name_scope=False):
    tensors = list(tensors)
    if _group_is_tf(tensors):
        return ops.grouped_reducescatter(tensors, op, name, prescale_factor, postscale_factor, compression,
                                         process_set)
    return crossing.runtime().grouped_reducescatter(tensors, op, name, prescale_factor, postscale_factor, process_set)


def alltoall(tensor, splits=None, name=None, process_set=None, ignore_name_scope=False):
    if _tf(tensor):
        return ops.alltoall(tensor, splits, name, process_set)
    return crossing.runtime().alltoall(tensor, splits, name, process_set)
