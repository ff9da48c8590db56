"""Deterministic default names, so unnamed collectives match across ranks (Horovod's rule).

Eagerly every rank runs the same Python in the same order, so a per-kind counter agrees: the
runtime's own (``<kind>.noname.<n>``, counted per process set), shared with calls on numpy arrays, so the name of a call
does not depend on the type of what one rank passes (an empty list goes to the numpy runtime)
and ``join()`` restarts TensorFlow's names with the runtime's. Inside
a ``tf.function`` a collective is created once, at trace time, and runs at every call under that
name: it takes the graph's unique name for it (``<function>/<scope>/blinkflow.allreduce_3``),
which depends only on the traced code, not on how many other functions a rank traced before.
"""
from __future__ import annotations

import re

import tensorflow as tf

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")


def default_name(kind: str, set_id: int = 0) -> str:
    """The automatic name of a ``kind`` collective of process set ``set_id``: eagerly the
    runtime's per-set counter; in a graph the graph's unique name, in a family of its own per set
    (a rank that traces another set's ops must not shift the global set's names)."""
    if tf.executing_eagerly():
        from ..runtime import api  # no MPI on import

        return api.auto_name(kind, set_id)
    graph = tf.compat.v1.get_default_graph()
    family = f"blinkflow.{kind}" if set_id == 0 else f"blinkflow.{kind}.ps{set_id}"
    # A tf.function's FuncGraph has a name; a TF1 tf.Graph (run by a Session) has none.
    return f"{getattr(graph, 'name', 'graph')}/{graph.unique_name(family, mark_as_used=True)}"


def resolve(name, kind: str, set_id: int = 0) -> str:
    """The user's name when given, else a deterministic default for ``kind`` in set ``set_id``."""
    return default_name(kind, set_id) if name is None else str(name)


def scope_name(name: str) -> str:
    """The last part of ``name`` made safe for a TF name scope (the collective keeps the original)."""
    last = _UNSAFE.sub("_", name.rstrip("/").rsplit("/", 1)[-1]).lstrip("_-/")
    return last or "blinkflow"
