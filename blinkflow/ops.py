"""Reduction operations (Horovod's names). Pure: no MPI, TensorFlow or CuPy."""
from __future__ import annotations

import enum


class ReduceOp(enum.IntEnum):
    """How an all-reduce or reduce-scatter combines the ranks' values.

    ``AVERAGE`` is ``SUM`` followed by a division by the number of ranks (Horovod's default).
    """

    AVERAGE = 0
    SUM = 1
    MIN = 2
    MAX = 3
    PRODUCT = 4

    @property
    def combiner(self) -> "ReduceOp":
        """The elementwise operation the data path applies (Average reduces as Sum)."""
        return ReduceOp.SUM if self is ReduceOp.AVERAGE else self


Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


def as_reduce_op(op) -> ReduceOp:
    """Accept a ReduceOp, its int value or its name ("sum", "Average", ...)."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str):
        try:
            return ReduceOp[op.upper()]
        except KeyError:
            pass
    elif isinstance(op, int):
        try:
            return ReduceOp(op)
        except ValueError:
            pass
    from .errors import BlinkflowError

    raise BlinkflowError(f"unknown reduce op {op!r}; use blinkflow.Average, Sum, Min, Max or Product")
