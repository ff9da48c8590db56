"""Deterministic default names, so unnamed collectives match across ranks (Horovod's rule).

Collectives are matched across ranks by name; an unnamed call's name must therefore be one that
every rank derives alike from the code it runs, and from nothing else a rank did before.

**Eagerly** every rank runs the same Python in the same order, so a per-kind counter agrees: the
runtime's own (``<kind>.noname.<n>``, counted per process set), shared with calls on numpy
arrays, so the name of a call does not depend on the type of what one rank passes (an empty list
goes to the numpy runtime) and ``join()`` restarts TensorFlow's names with the runtime's.

**In a graph** a collective is created once, when the graph is built, and runs under that name
at every call. Its name is the identity of the function being traced plus the call's position in
that function's trace: ``<function>/<body path>/blinkflow.<kind>[.ps<set>][_<k>]``, the k-th
(from 0, unwritten) unnamed ``kind`` call at that body path in the function. Of TensorFlow's
names only the function's own is used:

- the function is the nearest enclosing ``tf.function`` (its Python name; a nested
  ``tf.function`` is a function of its own, since its trace is cached and may be reused from
  another caller) or the TF1 ``tf.Graph`` (``graph``);
- the bodies of ``tf.while_loop``, ``tf.cond``/``tf.case`` (and of AutoGraph's
  ``for i in tf.range(...)`` and ``if``, which build them) and the tf.data functions of a
  dataset loop are parts of the function that builds them, written by their kind (``while``,
  ``while_cond``, ``cond``, ``dataset``), never by their graph's name: TensorFlow names those
  graphs with a process-wide counter (``while_body_23``, ``cond_true_41``), which differs
  between ranks as soon as one rank traced one function more;
- name scopes are left out: Keras names layers (and their scopes) with process-wide counters
  too (``dense_3`` on the rank that built one more model);
- TensorFlow's generated function names (``__backward_f_123``, the gradient of a nested
  function) keep the function's name and lose the counter (``f.backward``).

Horovod names a graph's collective after its input tensor (``HorovodAllreduce_<tensor name>``,
``mpi_ops._normalize_name``), which is local to the function's graph as well but carries the
name scopes; the position in the trace keeps what holds of that (one name per op of the
traced function, the same on every rank that traced the same code) without the scopes.

So the name does not depend on how many functions, loops or layers a rank built before, on
retracing (a retrace names its calls as the first trace did, so ranks that traced different
signatures pair by name and a real difference is a TensorMismatchError), or on XLA (a
``jit_compile=True`` function is traced like any other). What no naming can make agree is an
order of calls that differs by rank: Python in a traced function that branches on the rank,
iterates over a ``set`` or unordered keys (string hashes differ per process), or unnamed eager
calls issued from several threads at once; such calls need names (``name=``). One case a rank
can see on its own is refused on every rank (:func:`refuse_while_tracing`): a call on numpy
arrays (or an object, a barrier) made while a ``tf.function`` is traced.
"""
from __future__ import annotations

import re
import weakref
from typing import Dict, List, Tuple

import tensorflow as tf

from ..errors import NotSupportedError
from ..runtime.global_state import RUNTIME

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")
#: Function graphs TensorFlow generates around a traced function: ``__backward_<function>_<uid>``.
_GENERATED = re.compile(r"__(inference|forward|backward)_(.+)_\d+")
#: tf.data names the functions it traces ``Dataset_<transformation>_<function>``.
_DATA_FUNCTION = "Dataset_"

_positions: "weakref.WeakKeyDictionary[tf.Graph, Dict[str, int]]" = weakref.WeakKeyDictionary()
"""Per function graph: how many names with each stem its trace has handed out."""


def default_name(kind: str, set_id: int = 0) -> str:
    """The automatic name of a ``kind`` collective of process set ``set_id``: eagerly the
    runtime's per-set counter; in a graph the enclosing function's name and the call's position
    in its trace, in a family of its own per set (a rank that traces another set's ops must not
    shift the global set's names)."""
    if tf.executing_eagerly():
        from ..runtime import api  # no MPI on import

        return api.auto_name(kind, set_id)
    family = f"blinkflow.{kind}" if set_id == 0 else f"blinkflow.{kind}.ps{set_id}"
    graph = tf.compat.v1.get_default_graph()
    function, path = enclosing_function(graph)
    return _next(function, "/".join([function_name(function)] + path + [family]))


def derived_name(base: str) -> str:
    """``base`` made unique in the trace of the function being built (``base``, ``base_1``, ...):
    for names derived from another call's (a gradient's collective from its forward one).
    Eagerly ``base`` itself: each eager call has finished before the next is made."""
    if tf.executing_eagerly():
        return base
    function, _ = enclosing_function(tf.compat.v1.get_default_graph())
    return _next(function, base)


def enclosing_function(graph) -> Tuple[tf.Graph, List[str]]:
    """The function whose trace builds ``graph`` and the path of bodies from it to ``graph``
    (``["while", "cond"]`` for a tf.cond in a loop's body)."""
    path: List[str] = []
    while True:
        outer = getattr(graph, "outer_graph", None)
        kind = _body_kind(graph)
        if kind is None or outer is None:
            return graph, path[::-1]
        path.append(kind)
        graph = outer


def _body_kind(graph):
    """``while``/``while_cond``/``cond`` for a control-flow body, ``dataset`` for a tf.data
    function built inside a function's trace, None for a function of its own."""
    if getattr(graph, "is_control_flow_graph", False):
        from tensorflow.python.ops import control_flow_v2_func_graphs as bodies  # no public spelling

        if isinstance(graph, bodies.WhileBodyFuncGraph):
            return "while"
        if isinstance(graph, bodies.WhileCondFuncGraph):
            return "while_cond"
        return "cond"
    outer = getattr(graph, "outer_graph", None)
    if str(getattr(graph, "name", "")).startswith(_DATA_FUNCTION) and getattr(outer, "building_function", False):
        return "dataset"
    return None


def function_name(graph) -> str:
    """The identity of a function graph: the traced function's name (a TF1 graph: ``graph``),
    with TensorFlow's process-wide counter taken out of the names it generates."""
    name = getattr(graph, "name", None)
    if not getattr(graph, "building_function", False) or not name:
        return "graph"
    generated = _GENERATED.fullmatch(name)
    return f"{generated.group(2)}.{generated.group(1)}" if generated else str(name)


def _next(function: tf.Graph, stem: str) -> str:
    counts = _positions.setdefault(function, {})
    k = counts.get(stem, 0)
    counts[stem] = k + 1
    return stem if k == 0 else f"{stem}_{k}"


def resolve(name, kind: str, set_id: int = 0) -> str:
    """The user's name when given, else a deterministic default for ``kind`` in set ``set_id``."""
    return default_name(kind, set_id) if name is None else str(name)


def scope_name(name: str) -> str:
    """The last part of ``name`` made safe for a TF name scope (the collective keeps the original)."""
    last = _UNSAFE.sub("_", name.rstrip("/").rsplit("/", 1)[-1]).lstrip("_-/")
    return last or "blinkflow"


def refuse_while_tracing(kind: str) -> None:
    """Refuse an automatic runtime name (``<kind>.noname.<n>``) drawn while a ``tf.function`` is
    traced: a call on numpy arrays there runs once per trace, when the function is traced, not
    at each call, and when a rank traces is its own history (its first call, a retrace for a new
    input shape, a function the other ranks never traced), so the counter's position, and with it
    the name, cannot be the same on every rank. Every rank traces the function, so every rank
    raises, before anything is submitted."""
    if tf.inside_function():
        raise NotSupportedError(
            f"an unnamed blinkflow {kind} on numpy arrays (or objects) was called while a tf.function was being "
            "traced: it would run once, when this rank traces the function (a first call, a retrace for a new "
            "input shape), not at each call, so no name for it can agree across ranks. Pass TensorFlow tensors "
            "(tf.constant(array)) to make it part of the function, or call it outside the tf.function")


RUNTIME.name_guards.append(refuse_while_tracing)
