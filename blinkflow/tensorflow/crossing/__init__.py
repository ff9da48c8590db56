"""The crossing between TensorFlow and the runtime: a collective on TF tensors becomes a function
over arrays that enqueues on the runtime, the tensors going to the backend that owns their memory.

A whole list of tensors crosses in ONE call, so the runtime sees every gradient of a step at once
and fuses them. How it crosses depends on where the call is built; :func:`mode` answers with the
one module for that context, and every mode module offers the same three calls:

* ``call(fn, tensors, out_dtypes, out_shapes, name)``: ``fn`` on the tensors' arrays, blocking;
* ``submit(fn, tensors, name)``: ``fn`` hands the arrays to the runtime and returns its handle at
  once, as an int64 scalar, so a training step starts reducing early gradients while backprop
  computes the rest (:mod:`..gradients`); it never blocks a TensorFlow thread;
* ``wait(finishers, handles, out_dtypes, out_shapes, name)``: every result of the submissions, the
  first error raised after every handle was synchronized (:mod:`.handles`), so no name stays in
  flight.

Modules, one job each:

``eager``    executing eagerly: the function runs at once
``graph``    inside a ``tf.function``: one stateful ``tf.py_function`` or ``tf.numpy_function`` op
``tf1``      in a TF1 graph run by ``tf.compat.v1.Session``: submit, an asynchronous await, collect
``xla``      inside an XLA cluster (``jit_compile``): a custom call on XLA's buffers
``arrays``   tensors to the runtime's arrays and back, by where their memory lives (host or device)
``handles``  the two halves of a submitted collective, and its deferred errors
``errors``   runtime errors as their ``tf.errors`` twins, in graphs and eagerly
"""
from __future__ import annotations

from types import ModuleType

import tensorflow as tf

from . import eager, graph, tf1, xla


def mode() -> ModuleType:
    """The crossing module for ops built now: :mod:`.eager`, :mod:`.xla`, :mod:`.tf1` (where its
    compiled ops are available; else a TF1 graph's calls block like a ``tf.function``'s, which is
    safe when each ``Session.run`` runs one blinkflow op or its ops depend on each other) or
    :mod:`.graph`."""
    if tf.executing_eagerly():
        return eager
    if xla.in_xla_context():
        return xla
    if tf1.in_tf1_graph() and tf1.available():
        return tf1
    return graph


def runtime():
    """``blinkflow.runtime.api``, the runtime every mode hands to, imported on first use (it
    initialises MPI)."""
    from ...runtime import api

    return api
