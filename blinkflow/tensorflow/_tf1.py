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
3. *collect* returns the results, or the error status that ``_errors.raise_on_failure`` turns
   into the ``tf.errors`` class of the runtime's error.

Every rank's submits then run as soon as their inputs exist, whatever the order, and names pair
the calls across ranks. Without a C++ compiler (no ``BlinkflowAwait``) the graph falls back to
blocking calls, which are safe when each ``Session.run`` runs one blinkflow op (a grouped call
counts as one) or its ops depend on each other.
"""
from __future__ import annotations

import collections
import itertools
import threading
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ..errors import BlinkflowError
from . import _errors, _op_library
from ._naming import scope_name

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


class Route(NamedTuple):
    """How the bridge moves a call's tensors (:mod:`._bridge` hands its own to :func:`call`)."""

    device: bool
    """Whether the device route is possible (then the op is a ``tf.py_function``)."""
    to_arrays: Callable[[list], list]
    """Tensors to the runtime's arrays, by the route their placement asks for."""
    to_tensors: Callable[[list, List[tf.DType]], list]
    """The runtime's results back to tensors."""
    conversions: "collections.Counter[str]"
    """Tensors each route carried."""


def call(fn, tensors: Sequence[tf.Tensor], out_dtypes: List[tf.DType], out_shapes, name: str,
         route: Route) -> List[tf.Tensor]:
    """The bridge's blocking crossing in a TF1 graph: submit, await, collect (see the module's
    docstring); tensors cross by ``route``."""
    module = _op_library.load()
    device = route.device

    if device:
        def submit(*eager):
            arrays = route.to_arrays(list(eager))  # the route by placement, as eagerly
            return _start(lambda: fn(arrays))

        def collect(ticket):
            kind, value = _outcome(ticket.numpy())
            if kind == "ok":
                return _errors.ok(route.to_tensors(value, out_dtypes))
            if kind == "failed":
                return _errors.failed(value, out_dtypes)
            raise value
    else:
        def submit(*arrays):
            route.conversions["host"] += len(arrays)
            return _start(lambda: fn(list(arrays)))

        def collect(ticket):
            kind, value = _outcome(ticket)
            if kind == "ok":
                return _errors.ok([np.asarray(o, dtype=d.as_numpy_dtype) for o, d in zip(value, out_dtypes)])
            if kind == "failed":
                return _errors.failed(value, out_dtypes)
            raise value

    wrap = tf.py_function if device else (lambda f, inp, tout, name: tf.numpy_function(f, inp, tout, stateful=True,
                                                                                       name=name))
    with tf.name_scope(scope_name(name)):
        ticket = wrap(submit, list(tensors), tf.int64, name="runtime_submit")
        ticket.set_shape([])
        ready = module.blinkflow_await(ticket)
        results = wrap(collect, [ready], list(out_dtypes) + _errors.STATUS_DTYPES, name="runtime_collect")
    outs = _errors.raise_on_failure(results[:len(out_dtypes)], results[len(out_dtypes):])
    for out, shape in zip(outs, out_shapes):
        out.set_shape(shape)
    return outs
