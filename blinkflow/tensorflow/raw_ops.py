"""Collectives on TF tensors without a gradient: :func:`raw` runs one collective on a list of
tensors as ONE runtime request and returns its results as tensors (eagerly, inside
``tf.function``, in TF1 graphs and in XLA clusters, by the crossing of that context,
:func:`.crossing.mode`). The differentiable collectives of :mod:`.ops` are built on it.

Each kind is one entry of :data:`_KINDS`: how it is submitted and waited for, and what its
outputs look like before they run (all-gather and reduce-scatter change the first dimension;
all-to-all also returns the rows received from each rank). :func:`refuse` sends a call these
bindings refused to the runtime under its name, so every rank raises the same error.
"""
from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ..errors import ProcessSetError
from ..runtime.process_sets import set_id_of
from . import crossing, rank_ops


def _allreduce(rt, arrays, name, process_set, op, prescale_factor=1.0, postscale_factor=1.0):
    return rt.synchronize(rt.grouped_allreduce_async(arrays, op=op, name=name, prescale_factor=prescale_factor,
                                                     postscale_factor=postscale_factor, process_set=process_set))


def _allgather(rt, arrays, name, process_set):
    return rt.synchronize(rt.grouped_allgather_async(arrays, name=name, process_set=process_set))


def _broadcast(rt, arrays, name, process_set, root_rank):
    # One request for the whole list: a rank with another count fails everywhere.
    return rt.synchronize(rt.grouped_broadcast_async(arrays, root_rank, name=name, process_set=process_set))


def _reducescatter(rt, arrays, name, process_set, op, prescale_factor=1.0, postscale_factor=1.0):
    return rt.synchronize(rt.grouped_reducescatter_async(arrays, op=op, name=name, prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor, process_set=process_set))


def _alltoall(rt, arrays, name, process_set):
    """``arrays`` is (tensor, splits); empty splits mean none given: even blocks, or every rank's
    InvalidArgumentError. The runtime checks the splits (integers, one per rank, summing to the
    rows). Returns (output, rows received from each rank)."""
    tensor, splits = arrays
    if splits.size == 0:
        n = rank_ops.size(process_set)
        if tensor.ndim == 0 or tensor.shape[0] % n:
            return [rt.synchronize(rt.alltoall_async(tensor, name=name, process_set=process_set)), None]  # raises
        # Even blocks, spelled out: the runtime then says how many rows each rank sent here,
        # which differs per rank when the ranks' first dimensions do (the gradient sends them back).
        splits = np.full(n, tensor.shape[0] // n, dtype=np.int32)
    out, received = rt.synchronize(rt.alltoall_async(tensor, splits=splits, name=name, process_set=process_set))
    return [out, np.asarray(received, dtype=np.int32)]


def _refused(rt, arrays, name, process_set, collective, error):
    return rt.synchronize(rt.refused_async(collective, name, error, process_set=process_set))  # raises


def _as_given(tensors):
    return [t.dtype for t in tensors], [t.shape for t in tensors]


def _rows_vary(tensors):
    """The first dimension of each output is only known when it runs."""
    return [t.dtype for t in tensors], [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape
                                        for t in tensors]


def _alltoall_outputs(tensors):
    tensor = tensors[0]
    return [tensor.dtype, tf.int32], [tf.TensorShape([None]).concatenate(tensor.shape[1:]), tf.TensorShape([None])]


class _Kind(NamedTuple):
    run: Callable[..., Sequence]
    """(runtime, arrays, name, process_set, **args) -> the result arrays."""
    outputs: Callable[[List[tf.Tensor]], Tuple[list, list]]
    """tensors -> (dtypes, static shapes) of the results."""


_KINDS: Dict[str, _Kind] = {
    "allreduce": _Kind(_allreduce, _as_given),
    "allgather": _Kind(_allgather, _rows_vary),
    "broadcast": _Kind(_broadcast, _as_given),
    "reducescatter": _Kind(_reducescatter, _rows_vary),
    "alltoall": _Kind(_alltoall, _alltoall_outputs),
    "refused": _Kind(_refused, _as_given),
}


def raw(kind: str, tensors: Sequence[tf.Tensor], name: str, process_set=None, **args) -> List[tf.Tensor]:
    """Collective ``kind`` of ``tensors``, one runtime request named ``name`` on ``process_set``;
    ``args`` are the kind's own (``op``, ``prescale_factor``, ``postscale_factor``, ``root_rank``).
    For ``"alltoall"`` ``tensors`` is ``[tensor, splits]`` and the results ``[output, received]``."""
    entry = _KINDS[kind]
    tensors = list(tensors)
    if process_set is not None and not tf.executing_eagerly():
        _check_registered(process_set)
    dtypes, shapes = entry.outputs(tensors)

    def run(arrays):
        return entry.run(crossing.runtime(), arrays, name, process_set, **args)

    return crossing.mode().call(run, tensors, dtypes, shapes, name)


def _check_registered(process_set) -> None:
    """In a graph, ``process_set`` must be registered when the collective is built: a
    ProcessSetError (a ValueError, Horovod's class) raised then, on every rank alike (every rank
    registers the same sets), where a failing graph op could only return a ``tf.errors`` class.
    Before ``init()`` nothing is known yet: the runtime reports it when the graph runs."""
    rt = crossing.runtime()
    if not rt.is_initialized():
        return
    set_id = set_id_of(process_set)  # ProcessSetError for what is no registered ProcessSet
    if set_id != 0 and rt.process_set_ranks(set_id) is None:
        raise ProcessSetError(f"{process_set} is not registered (it was removed, or never passed to "
                              "init(process_sets=...) or add_process_set)")


def refuse(kind: str, name: str, error: Exception, tensors: Sequence[tf.Tensor], process_set=None) -> List[tf.Tensor]:
    """A ``kind`` call refused here, before the runtime saw it, still goes to the runtime under
    ``name``, so every rank raises the same InvalidArgumentError naming this rank; in a graph,
    when the step runs. The outputs mirror ``tensors`` (never produced: the call always fails)
    so that the graph traces."""
    return raw("refused", tensors, name, process_set, collective=kind, error=error)
