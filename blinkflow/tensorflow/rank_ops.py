"""Ranks and sizes for the TF binding: the Python helpers the collectives use (:func:`size`,
:func:`rank`, :func:`set_rank`, :func:`set_id`), and Horovod's graph ops ``size_op``,
``rank_op``, ``local_size_op``, ``local_rank_op``, ``process_set_included_op``.

Horovod: "This operation determines the return value at the graph execution time, rather than at
the graph construction time, and so allows for a graph to be constructed in a different
environment than where it will be executed." Eagerly each is an int32 constant; in a graph (a
``tf.function`` or a TF1 graph) a stateful op that asks the runtime when it runs. None has a
gradient.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from ..errors import BlinkflowError
from ..runtime.process_sets import set_id_of
from . import crossing

#: ``process_set_included_op``'s answers besides 0 and 1 (Horovod's error codes).
PROCESS_SET_ERROR_INIT = -1
PROCESS_SET_ERROR_UNKNOWN_SET = -3


def size(process_set=None) -> int:
    """The number of ranks of ``process_set`` (default: the job)."""
    if process_set is None or set_id_of(process_set) == 0:
        return crossing.runtime().size()
    return process_set.size()


def rank() -> int:
    """This process's rank in the job."""
    return crossing.runtime().rank()


def set_rank(process_set=None) -> int:
    """This rank's place in ``process_set`` (its rank in the job for the global set)."""
    if process_set is None or set_id_of(process_set) == 0:
        return rank()
    return process_set.rank()


def set_id(process_set) -> int:
    """The id of ``process_set`` for naming a call, -1 for one that is not registered: the
    runtime raises that error on every rank when the call reaches it."""
    try:
        return set_id_of(process_set)
    except BlinkflowError:
        return -1


def _at_run_time(query: Callable[[], int], name) -> tf.Tensor:
    if tf.executing_eagerly():
        return tf.constant(query(), tf.int32)
    out = tf.numpy_function(lambda: np.int32(query()), [], tf.int32, stateful=True, name=name or "blinkflow_query")
    out.set_shape([])
    return out


def size_op(process_set_id: int = 0, name=None) -> tf.Tensor:
    """The number of ranks of process set ``process_set_id`` (default: the job)."""
    def query():
        rt = crossing.runtime()
        if process_set_id == 0:
            return rt.size()
        ranks = rt.process_set_ranks(process_set_id)
        if ranks is None:
            from ..errors import ProcessSetError

            raise ProcessSetError(f"size_op: process set {process_set_id} is not registered")
        return len(ranks)

    return _at_run_time(query, name)


def rank_op(name=None) -> tf.Tensor:
    """This process's rank in the job."""
    return _at_run_time(lambda: crossing.runtime().rank(), name)


def local_size_op(name=None) -> tf.Tensor:
    """The number of ranks on this host."""
    return _at_run_time(lambda: crossing.runtime().local_size(), name)


def local_rank_op(name=None) -> tf.Tensor:
    """This process's rank on its host."""
    return _at_run_time(lambda: crossing.runtime().local_rank(), name)


def process_set_included_op(process_set_id: int = 0, name=None) -> tf.Tensor:
    """1 if this process is in process set ``process_set_id``, else 0; -1 before ``init()``, -3
    for a set that is not registered (Horovod's codes)."""
    def query():
        rt = crossing.runtime()
        if not rt.is_initialized():
            return PROCESS_SET_ERROR_INIT
        ranks = rt.process_set_ranks(process_set_id)
        if ranks is None:
            return PROCESS_SET_ERROR_UNKNOWN_SET
        return int(rt.rank() in ranks)

    return _at_run_time(query, name)
