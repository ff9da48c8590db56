"""Collectives in TF1-style graphs (``tf.Graph`` run by ``tf.compat.v1.Session``): each call is
three ops, and none holds a thread while the other ranks catch up.

In a ``tf.function`` TensorFlow's automatic control dependencies run stateful ops in program
order, so a collective can simply block its thread until every rank joined. A TF1 graph has no
such order: a Session starts the ready ops of a step in whatever order its executor picks, and
that order differs between ranks. A blocking op would then hold every executor thread of rank 0
in collectives rank 1 has not started, while rank 1's threads wait in others (seen with 25
independent all-reduces in one ``Session.run``, at 1 and at 2 inter-op threads). Horovod's ops
are asynchronous kernels for this reason; blinkflow's are too:

1. *submit* (a stateful ``tf.numpy_function``, or ``tf.py_function`` where the device route is
   possible) hands the arrays to a worker thread that runs the call on the runtime, and returns
   a ticket at once;
2. ``BlinkflowAwait(ticket)`` (``await_op.cc``) is an asynchronous kernel: it holds no thread
   until the worker marks the ticket done;
3. *collect* returns the results, or the error status that ``errors.raise_on_failure`` turns
   into the ``tf.errors`` class of the runtime's error.

Every rank's submits then run as soon as their inputs exist, whatever the order, and names pair
the calls across ranks. Without a C++ compiler (no ``BlinkflowAwait``) the graph falls back to
blocking calls, which are safe when each ``Session.run`` runs one blinkflow op (a grouped call
counts as one) or its ops depend on each other.
"""
from __future__ import annotations

import itertools
import threading
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ... import placement
from ...errors import BlinkflowError
from .. import _op_library
from .._naming import scope_name
from . import arrays, errors, graph, handles

_tickets = itertools.count(1)
_outcomes: Dict[int, Tuple[str, object]] = {}
_lock = threading.Lock()


def in_tf1_graph() -> bool:
    """Building a TF1-style graph (not eager, not a tf.function)."""
    return not tf.executing_eagerly() and not tf.compat.v1.get_default_graph().building_function


def available() -> bool:
    return _op_library.load() is not None


def _start(work) -> np.int64:
    """Run ``work()`` on a thread of its own; returns the ticket its BlinkflowAwait waits on."""
    ticket = next(_tickets)

    def run():
        try:
            outcome = ("ok", work())
        except BlinkflowError as error:
            outcome = ("failed", error)
        except BaseException as error:  # noqa: BLE001 - a bug: re-raised by collect, on the TF thread
            outcome = ("raised", error)
        with _lock:
            _outcomes[ticket] = outcome
        _op_library.mark_done(ticket)

    threading.Thread(target=run, name=f"blinkflow-tf1-{ticket}", daemon=True).start()
    return np.int64(ticket)


def _outcome(ticket) -> Tuple[str, object]:
    with _lock:
        return _outcomes.pop(int(ticket))


def call(fn: Callable[[list], Sequence], tensors: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
         out_shapes, name: str) -> List[tf.Tensor]:
    """A blocking collective in a TF1 graph: ``fn`` on the arrays of ``tensors`` by their placement
    (:mod:`.arrays`), as submit, await, collect (see the module's docstring)."""
    inputs_of = arrays.of_tensors if placement.tensors_may_go_to_device() else arrays.of_host
    return _three_ops(fn, inputs_of, tensors, out_dtypes, out_shapes, name)


def wait(finishers, handle_tensors: Sequence[tf.Tensor], out_dtypes, out_shapes, name: str) -> List[tf.Tensor]:
    """Every result of the submissions ``handle_tensors`` (see :func:`.handles.collector`), as
    submit, await, collect."""
    return _three_ops(handles.collector(finishers), arrays.handles, handle_tensors, out_dtypes, out_shapes, name)


submit = graph.submit
"""A submission never blocks: the ``tf.function`` op serves a TF1 graph as it is."""


def _three_ops(fn, inputs_of, tensors, out_dtypes, out_shapes, name) -> List[tf.Tensor]:
    module = _op_library.load()
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    device = placement.tensors_may_go_to_device()

    def submit_fn(*values):
        inputs = inputs_of(list(values))  # on TF's thread: an eager tensor's route is read here
        return _start(lambda: fn(inputs))

    def collect(ticket):
        kind, value = _outcome(ticket.numpy() if device else ticket)
        if kind == "ok":
            return errors.ok(arrays.to_tensors(value, out_dtypes) if device else arrays.host_results(value, out_dtypes))
        if kind == "failed":
            return errors.failed(value, out_dtypes)
        raise value

    wrap = tf.py_function if device else (lambda f, inp, tout, name: tf.numpy_function(f, inp, tout, stateful=True,
                                                                                       name=name))
    with tf.name_scope(scope_name(name)):
        ticket = wrap(submit_fn, list(tensors), tf.int64, name="runtime_submit")
        ticket.set_shape([])
        ready = module.blinkflow_await(ticket)
        results = wrap(collect, [ready], out_dtypes + errors.STATUS_DTYPES, name="runtime_collect")
    outs = errors.raise_on_failure(results[:len(out_dtypes)], results[len(out_dtypes):])
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs
