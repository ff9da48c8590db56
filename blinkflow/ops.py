"""Reduction operations (Horovod's names). Pure: no MPI, TensorFlow or CuPy."""
from __future__ import annotations

import enum


class ReduceOp(enum.IntEnum):
    """How an all-reduce or reduce-scatter combines the ranks' values.

    ``AVERAGE`` is ``SUM`` followed by a division by the number of ranks (Horovod's default).
    ``ADASUM`` is Horovod's adaptive summation (:mod:`blinkflow.backends.adasum`): not elementwise,
    so it is its own algorithm, never a combiner of the trees.
    """

    AVERAGE = 0
    SUM = 1
    MIN = 2
    MAX = 3
    PRODUCT = 4
    ADASUM = 5

    @property
    def combiner(self) -> "ReduceOp":
        """The elementwise operation the data path applies (Average reduces as Sum)."""
        return ReduceOp.SUM if self is ReduceOp.AVERAGE else self

    @property
    def elementwise(self) -> bool:
        """Whether element i of the result depends on element i of the inputs alone."""
        return self is not ReduceOp.ADASUM


Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT
Adasum = ReduceOp.ADASUM


def as_reduce_op(op) -> ReduceOp:
    """Accept a ReduceOp, its int value or its name ("sum", "Average", ...)."""
    if isinstance(op, ReduceOp):
        return op
    by_name = ReduceOp.__members__.get(op.upper()) if isinstance(op, str) else None
    by_value = op if isinstance(op, int) and op in ReduceOp._value2member_map_ else None
    if by_name is not None:
        return by_name
    if by_value is not None:
        return ReduceOp(by_value)
    from .errors import BlinkflowError

    raise BlinkflowError(f"unknown reduce op {op!r}; use blinkflow.Average, Sum, Min, Max, Product or Adasum")
