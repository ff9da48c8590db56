"""Collectives on TF tensors in two halves: submit now, wait once for many.

Horovod's TensorFlow ops are asynchronous kernels: each enqueues its tensor and lets the graph
go on, and the graph's consumers wait for the result. blinkflow's crossing into the runtime is
a Python op (:mod:`._bridge`), which cannot complete later; so a collective is split into a
*submit* op, which enqueues and returns a handle at once, and a *wait* op, which takes the
handles of many submissions and returns all their results. Between them TensorFlow keeps
computing: a submit runs as soon as its own inputs exist. :mod:`.gradients` builds its buckets
on these; they are not differentiable (the differentiable collectives are in :mod:`.ops`).
"""
from __future__ import annotations

from typing import List, NamedTuple, Sequence

import tensorflow as tf

from . import _bridge


class Pending(NamedTuple):
    """A submitted collective: its handle, and the dtypes and shapes its results will have."""

    handle: tf.Tensor
    dtypes: List[tf.DType]
    shapes: List[tf.TensorShape]


def submit_grouped_allreduce(tensors: Sequence[tf.Tensor], op, name: str, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0) -> Pending:
    """Start all-reducing ``tensors`` as one group named ``name`` (fused by the runtime)."""
    def start(arrays):
        return _bridge.runtime().grouped_allreduce_async(arrays, op=op, name=name, prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor)

    tensors = list(tensors)
    return Pending(_bridge.submit(start, tensors, name), [t.dtype for t in tensors], [t.shape for t in tensors])


def submit_grouped_allgather(tensors: Sequence[tf.Tensor], name: str) -> Pending:
    """Start concatenating each tensor over ranks along its first dimension."""
    def start(arrays):
        return _bridge.runtime().grouped_allgather_async(arrays, name=name)

    tensors = list(tensors)
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else t.shape for t in tensors]
    return Pending(_bridge.submit(start, tensors, name), [t.dtype for t in tensors], shapes)


def wait(pendings: Sequence[Pending], name: str) -> List[List[tf.Tensor]]:
    """The results of ``pendings``, one list per submission, from one crossing."""
    pendings = list(pendings)
    if not pendings:
        return []
    dtypes = [d for p in pendings for d in p.dtypes]
    shapes = [s for p in pendings for s in p.shapes]
    flat = _bridge.wait(_bridge.runtime().synchronize, [p.handle for p in pendings], dtypes, shapes, name)
    out, at = [], 0
    for p in pendings:
        out.append(flat[at:at + len(p.dtypes)])
        at += len(p.dtypes)
    return out
