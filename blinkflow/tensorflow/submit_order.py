"""Making TensorFlow submit a gradient bucket the moment backprop has produced it.

A bucket's submit op depends only on its own gradients, yet TensorFlow's executor may run it
late: on CPU every kernel that is not trivially cheap counts as expensive, and an expensive
op that becomes ready while the current thread has other work queued is handed to the
inter-op thread pool, whose worker takes the *newest* task first (Eigen's per-thread queues
are LIFO). Backprop keeps queuing newer ops in front of the submit, so with one inter-op
thread it runs at the very end, and the all-reduce overlaps nothing.

So the ops that the *next* bucket needs and this one does not (the backprop still to come:
the gradient flowing into earlier layers) are made to wait for this bucket's submit, with a
control edge on each op where that region starts. The executor then cannot go further down
the network before it has submitted the bucket, with any number of threads. An edge is added
only into ops this submit depends on neither now nor once the step is traced, so no cycle can
form: besides the submit's inputs, that is every stateful op without a resource input made
before the submit, which ``tf.function``'s automatic control dependencies run in program order
and so before it (a SyncBatchNormalization's all-reduce in backprop: gated behind the first
bucket, it closed a cycle through that chain). Ops inside TF1-style control flow are left alone.
(Horovod's kernels avoid this as asynchronous C++ ops; ByteScheduler, Peng et al., SOSP 2019, likewise orders communication by when layers need it.) Graph mode only:
eagerly, ops run in program order.
"""
from __future__ import annotations

from typing import Iterable, Sequence, Set

import tensorflow as tf


#: Ops never gated (the region is then entered at its other entries): grappler's constant
#: folding turns a shape op into constants that keep its control inputs, and its rewrites then
#: closed a cycle through a submit (a convolution's ShapeN, whose outputs feed both its filter's
#: gradient and its input's, in ``model.fit`` with a bucket per gradient: "nodes in a cycle").
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})


class SubmitOrder:
    """Adds the control edges for one traced step; knows which ops each submit depends on."""

    def __init__(self):
        self._needed: Set[tf.Operation] = set()
        """Every op some submit so far depends on (closed under inputs)."""
        self._scanned = 0
        """How many of the graph's ops (in the order they were made) were looked at for
        :func:`_chained`: those made before the last submit."""

    def submit_before(self, submit: tf.Operation, later: Sequence[tf.Tensor]) -> int:
        """Make the ops that compute ``later`` but that ``submit`` does not need wait for
        ``submit``: a control edge into each op where that region starts. Returns how many."""
        graph = submit.graph
        made = graph.get_operations()  # in the order they were made
        end = self._scanned
        while end < len(made) and made[end]._id < submit._id:  # noqa: SLF001
            end += 1
        chained = [op for op in made[self._scanned:end] if _chained(op)]
        self._scanned = end
        self._needed |= _ancestors([submit, *chained], graph, self._needed)
        entries = []
        seen: Set[tf.Operation] = set()
        stack = [t.op for t in later if t.op.graph is graph]
        while stack:
            op = stack.pop()
            if op in seen or op in self._needed:
                continue
            seen.add(op)
            inputs = [i for i in _inputs(op) if i.graph is graph]
            # Sources (ops without inputs: a function's arguments, constants) are never gated and
            # do not count as the region: a weight read by backprop starts it.
            if inputs and all(i in self._needed or not _inputs(i) for i in inputs):
                entries.append(op)
            stack.extend(inputs)
        added = 0
        for op in entries:
            if op._control_flow_context is None and op.type not in SHAPE_OPS:  # noqa: SLF001 - TF1 contexts: leave alone
                op._add_control_input(submit)  # noqa: SLF001 - what automatic control deps use too
                added += 1
        return added


def _chained(op: tf.Operation) -> bool:
    """Whether the automatic control dependencies of ``tf.function`` put ``op`` on their one
    chain of stateful ops without a resource input, which runs them in the order they were made
    (``auto_control_deps``; taken wider here, with every stateful op: a wrongly counted op only
    loses some overlap, a missed one makes a cycle)."""
    return (op._is_stateful and op._control_flow_context is None  # noqa: SLF001
            and not any(t.dtype == tf.resource for t in op.inputs))


def _inputs(op: tf.Operation) -> Iterable[tf.Operation]:
    return [t.op for t in op.inputs] + list(op.control_inputs)


def _ancestors(ops: Sequence[tf.Operation], graph, known: Set[tf.Operation]) -> Set[tf.Operation]:
    """``ops`` and every op they depend on in ``graph``, not walking past ops in ``known``
    (already known with all their ancestors)."""
    found: Set[tf.Operation] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op in found or op in known:
            continue
        found.add(op)
        stack.extend(i for i in _inputs(op) if i.graph is graph)
    return found
