"""Deterministic default names, so unnamed collectives match across ranks (Horovod's rule).

Eagerly every rank runs the same Python in the same order, so a per-kind counter agrees. Inside
a ``tf.function`` a collective is created once, at trace time, and runs at every call under that
name: it takes the graph's unique name for it (``<function>/<scope>/blinkflow.allreduce_3``),
which depends only on the traced code, not on how many other functions a rank traced before.
"""
from __future__ import annotations

import collections
import itertools
import re

import tensorflow as tf

_eager_counters = collections.defaultdict(itertools.count)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")


def default_name(kind: str) -> str:
    if tf.executing_eagerly():
        return f"{kind}.eager.{next(_eager_counters[kind])}"
    graph = tf.compat.v1.get_default_graph()
    return f"{graph.name}/{graph.unique_name('blinkflow.' + kind, mark_as_used=True)}"


def resolve(name, kind: str) -> str:
    """The user's name when given, else a deterministic default for ``kind``."""
    return default_name(kind) if name is None else str(name)


def scope_name(name: str) -> str:
    """The last part of ``name`` made safe for a TF name scope (the collective keeps the original)."""
    last = _UNSAFE.sub("_", name.rstrip("/").rsplit("/", 1)[-1]).lstrip("_-/")
    return last or "blinkflow"
