"""Averaging a step's gradients over ranks: shared by DistributedOptimizer and
DistributedGradientTape.

Dense gradients go to the runtime in ONE grouped all-reduce (one bridge call, fused by the
runtime). ``IndexedSlices`` (embedding gradients) travel through allgather of values and indices
unless ``sparse_as_dense``; ``None`` gradients stay ``None``. ``gradient_predivide_factor`` splits
the averaging as Horovod does: scale by 1/f before the sum and by f/size after it.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import tensorflow as tf

from ..compression import Compression
from ..errors import BlinkflowError
from ..ops import ReduceOp, as_reduce_op
from . import ops


class GradientReducer:
    """Reduce lists of gradients with fixed settings; ``name`` prefixes the runtime names."""

    def __init__(self, name: str, op=ReduceOp.AVERAGE, compression=Compression.none,
                 gradient_predivide_factor: float = 1.0, sparse_as_dense: bool = False, process_set=None):
        self.name = name
        self.process_set = process_set
        """The process set the gradients are reduced over (None: every rank)."""
        self.op = as_reduce_op(op)
        self.compression = compression
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.sparse_as_dense = bool(sparse_as_dense)
        if self.gradient_predivide_factor != 1.0 and self.op is not ReduceOp.AVERAGE:
            raise BlinkflowError("gradient_predivide_factor needs op=Average")

    def _scale_factors(self):
        """(op, prescale, postscale) that the runtime applies."""
        f = self.gradient_predivide_factor
        if f == 1.0:
            return self.op, 1.0, 1.0
        return ReduceOp.SUM, 1.0 / f, f / ops.size(self.process_set)

    @tf.autograph.experimental.do_not_convert
    def reduce(self, grads: Sequence[Optional[tf.Tensor]]) -> List[Optional[tf.Tensor]]:
        grads = list(grads)
        out: List[Optional[tf.Tensor]] = [None] * len(grads)
        dense_at, dense = [], []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    out[i] = ops.allreduce(g, op=self.op, name=f"{self.name}.sparse.{i}",
                                           process_set=self.process_set)
                    continue
                g = tf.convert_to_tensor(g)
            dense_at.append(i)
            dense.append(g)
        if dense:
            op, pre, post = self._scale_factors()
            reduced = ops.grouped_allreduce(dense, op=op, name=f"{self.name}.dense", prescale_factor=pre,
                                            postscale_factor=post, compression=self.compression,
                                            process_set=self.process_set)
            for i, r in zip(dense_at, reduced):
                out[i] = r
        return out
