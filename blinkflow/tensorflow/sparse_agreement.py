"""Agreeing, before a step's gradients are submitted, on which of them travel sparse.

A dense gradient is all-reduced in a bucket and an ``IndexedSlices`` one is all-gathered on its
own, so the units a rank submits depend on which of its gradients are sparse. If one rank's
gradient of a variable is sparse and another's is dense (or ``None``: a branch its batch did not
take), their units cannot pair: each would wait for a collective the other never submits. So
each step first sums, over the process set, one flag per variable (1: sparse here) and the
number of ranks taking part; a variable whose count is neither 0 nor that number stops the step
with a :class:`~blinkflow.errors.TensorMismatchError` naming it, on every rank, before anything
else is submitted. A rank that has joined adds zeros to both sums, so it is not counted.

The flags of a traced step are fixed when it is traced; the sum runs at every step. It blocks the
thread TensorFlow runs it on until every rank has reached it, so in a graph it waits for the
first gradient backprop produces (``after``): every rank then reaches it at the same point of its
step, right after its forward pass. Without an input, TensorFlow's executor would run it wherever
its ready queue puts it, a point that differs from rank to rank: a rank that runs it early holds
its only compute thread idle until the peer's executor gets there, and the ranks lock into a lag
that lasts the whole job (docs/overlap.md, "Where a 128×128 step's time goes"). Steps where
every gradient goes dense (``sparse_as_dense``, XLA) need no agreement and skip it.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from ..arrays import on_device
from ..errors import TensorMismatchError
from ..ops import ReduceOp
from . import crossing


def variable_label(source, index: int) -> str:
    """How a message names the variable (or tape source) at ``index``."""
    label = getattr(source, "path", None) or getattr(source, "name", None)
    return f"{label} (source {index})" if label else f"source {index}"


def disagreements(totals: np.ndarray, labels: Sequence[str]) -> str:
    """The message for summed ``[ranks, flag_0, flag_1, ...]`` when some variable is sparse on
    some ranks only, else ''."""
    ranks = int(totals[0])
    mixed = [f"{labels[i]} (sparse on {int(c)} of {ranks} ranks)" for i, c in enumerate(totals[1:])
             if 0 < c < ranks]
    if not mixed:
        return ""
    return ("ranks disagree on whether these gradients are sparse (tf.IndexedSlices): " + ", ".join(mixed)
            + ". A sparse gradient is all-gathered and a dense or missing one all-reduced, so every rank's gradient "
              "of a variable must be of one kind: pass sparse_as_dense=True (a rank without the gradient then "
              "contributes zeros), or make every rank's step use the variable the same way.")


def agree(name: str, sparse_flags: Sequence[bool], labels: Sequence[str], process_set=None,
          after: Sequence[tf.Tensor] = ()) -> Optional[tf.Tensor]:
    """Check on every rank that ``sparse_flags`` agree (see the module); raises
    TensorMismatchError naming the variables that differ. Eagerly returns None once checked; in
    a graph returns the check's output, which the step's submissions must depend on, and runs
    the check once ``after`` (the first gradient backprop produces) exists."""
    flags = np.array([1] + [1 if f else 0 for f in sparse_flags], np.int64)

    def check(arrays):
        rt = crossing.runtime()
        totals = rt.synchronize(rt.allreduce_async(arrays[0], op=ReduceOp.SUM, name=name, process_set=process_set))
        totals = totals.get() if on_device(totals) else np.asarray(totals)
        message = disagreements(totals, labels)
        if message:
            raise TensorMismatchError(message, name=name)
        return [np.asarray(totals[0])]

    # Through the crossing like the gradients, eagerly too: the flags take the gradients' route (the
    # cuda backend's for GPU tensors), so the check adds no host collective to a GPU step.
    if tf.executing_eagerly():
        crossing.mode().call(check, [tf.constant(flags)], [tf.int64], [tf.TensorShape([])], name)
        return None
    with tf.control_dependencies(list(after)):
        return crossing.mode().call(check, [tf.constant(flags)], [tf.int64], [tf.TensorShape([])], name)[0]
