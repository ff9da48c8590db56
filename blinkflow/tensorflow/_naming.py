"""Deterministic default names, so unnamed collectives match across ranks (Horovod's rule).

Eagerly every rank runs the same Python in the same order, so a per-kind counter agrees: the
runtime's own (``<kind>.noname.<n>``), shared with calls on numpy arrays, so the name of a call
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


def default_name(kind: str) -> str:
    if tf.executing_eagerly():
        from ..runtime import api  # no MPI on import

        return api.auto_name(kind)
    graph = tf.compat.v1.get_default_graph()
    return f"{graph.name}/{graph.unique_name('blinkflow.' + kind, mark_as_used=True)}"


def resolve(name, kind: str) -> str:
    """The user's name when given, else a deterministic default for ``kind``."""
    return default_name(kind) if name is None else str(name)


def scope_name(name: str) -> str:
    """The last part of ``name`` made safe for a TF name scope (the collective keeps the original)."""
    last = _UNSAFE.sub("_", name.rstrip("/").rsplit("/", 1)[-1]).lstrip("_-/")
    return last or "blinkflow"
