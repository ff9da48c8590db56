"""Collectives on TF tensors in two halves: submit now, wait once for many.

Horovod's TensorFlow ops are asynchronous kernels: each enqueues its tensor and lets the graph
go on, and the graph's consumers wait for the result. blinkflow's crossing into the runtime is
a Python op (:mod:`._bridge`), which cannot complete later; so a collective is split into a
*submit* op, which enqueues and returns a handle at once, and a *wait* op, which takes the
handles of many submissions and returns all their results. Between them TensorFlow keeps
computing: a submit runs as soon as its own inputs exist. :mod:`.gradients` builds its buckets
on these; they are not differentiable (the differentiable collectives are in :mod:`.ops`).

A group of one dtype and static shapes comes back through the wait as ONE flat tensor, which
TensorFlow slices into the members: a Python op pays about 6 us per output (158 gradients of
MobileNetV2: 1 ms a step, against 0.3 ms for one flat output and the slices). The runtime
returns a group's results as consecutive views of one buffer, so the flat array is a view of
that buffer; where they are not consecutive, it is a copy.
"""
from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..arrays import on_device
from . import _bridge


class Pending(NamedTuple):
    """A submitted collective: its handle, and the dtypes and shapes its results will have."""

    handle: tf.Tensor
    dtypes: List[tf.DType]
    shapes: List[tf.TensorShape]
    flat: bool = False
    """Whether its results cross as one flat array (one dtype, static shapes)."""


def submit_grouped_allreduce(tensors: Sequence[tf.Tensor], op, name: str, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0, process_set=None) -> Pending:
    """Start all-reducing ``tensors`` over ``process_set`` (None: every rank) as one group named
    ``name`` (fused by the runtime)."""
    def start(arrays):
        return _bridge.runtime().grouped_allreduce_async(arrays, op=op, name=name, prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor, process_set=process_set)

    tensors = list(tensors)
    flat = len({t.dtype for t in tensors}) == 1 and all(t.shape.is_fully_defined() for t in tensors)
    return Pending(_bridge.submit(start, tensors, name), [t.dtype for t in tensors], [t.shape for t in tensors], flat)


def submit_grouped_allgather(tensors: Sequence[tf.Tensor], name: str, process_set=None) -> Pending:
    """Start concatenating each tensor over the ranks of ``process_set`` along its first dimension."""
    def start(arrays):
        return _bridge.runtime().grouped_allgather_async(arrays, name=name, process_set=process_set)

    tensors = list(tensors)
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape for t in tensors]
    return Pending(_bridge.submit(start, tensors, name), [t.dtype for t in tensors], shapes)


def wait(pendings: Sequence[Pending], name: str) -> List[List[tf.Tensor]]:
    """The results of ``pendings``, one list per submission, from one crossing."""
    pendings = list(pendings)
    if not pendings:
        return []
    synchronize = _bridge.runtime().synchronize
    finishers: List[Callable[[int], Sequence]] = []
    dtypes, shapes = [], []
    for p in pendings:
        if p.flat:
            finishers.append(lambda handle: [flat_view(synchronize(handle))])
            dtypes.append(p.dtypes[0])
            shapes.append(tf.TensorShape([sum(s.num_elements() for s in p.shapes)]))
        else:
            finishers.append(synchronize)
            dtypes.extend(p.dtypes)
            shapes.extend(p.shapes)
    crossed = _bridge.wait(finishers, [p.handle for p in pendings], dtypes, shapes, name)
    out, at = [], 0
    for p in pendings:
        if p.flat:
            out.append(_slices(crossed[at], p.shapes))
            at += 1
        else:
            out.append(crossed[at:at + len(p.dtypes)])
            at += len(p.dtypes)
    return out


def _slices(flat: tf.Tensor, shapes: Sequence[tf.TensorShape]) -> List[tf.Tensor]:
    out, at = [], 0
    for shape in shapes:
        n = shape.num_elements()
        out.append(tf.reshape(flat[at:at + n], shape))
        at += n
    return out


def flat_view(arrays: Sequence) -> object:
    """The arrays (numpy or cupy, one dtype) as one flat array: a view when they lie back to back
    in one buffer, C-contiguous (as the runtime returns a group), else a concatenated copy."""
    arrays = list(arrays)
    first = arrays[0]
    view = _consecutive_view(arrays)
    if view is not None:
        return view
    if on_device(first):
        import cupy

        return cupy.concatenate([a.reshape(-1) for a in arrays])
    return np.concatenate([a.reshape(-1) for a in arrays])


def _consecutive_view(arrays) -> Optional[object]:
    first = arrays[0]
    total = sum(a.size for a in arrays)
    pointer = (lambda a: a.__array_interface__["data"][0]) if isinstance(first, np.ndarray) else (lambda a: a.data.ptr)
    at = pointer(first)
    for a in arrays:
        if a.dtype != first.dtype or not a.flags.c_contiguous or pointer(a) != at:
            return None
        at += a.nbytes
    if isinstance(first, np.ndarray):  # numpy (and numpy-backed array types: subok keeps them)
        # A longer view from the first array's start: its base keeps the whole buffer alive.
        return np.lib.stride_tricks.as_strided(first.reshape(-1), shape=(total,), strides=(first.itemsize,),
                                               subok=True)
    return type(first)((total,), first.dtype, memptr=first.data)  # cupy: the allocation is kept alive
