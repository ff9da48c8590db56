"""Averaging a step's gradients over ranks: shared by DistributedOptimizer and
DistributedGradientTape.

The gradients are submitted in buckets, last layer first, as backprop produces them (PyTorch
DDP's buckets, Li et al., VLDB 2020; Horovod's asynchronous per-gradient ops), and collected by
one wait before the update (:mod:`.buckets` plans them, :mod:`.async_ops` submits and waits).
Inside a ``tf.function`` each bucket's submit op depends only on its own gradients, so
TensorFlow runs it while the earlier layers are still being differentiated and the runtime
reduces the bucket meanwhile; eagerly the buckets are submitted one after another and reduced
while the next ones are handed over. ``BLINKFLOW_BUCKET_BYTES`` sets the bucket size (0: one
bucket).

No rank can deadlock on another, even with one TensorFlow inter-op thread: submitting never
blocks, and the only op that blocks, the wait, needs every submission of its rank as input,
so it runs after all of them; buckets are matched across ranks by name, in whatever order
the ranks' executors happen to submit them.

``IndexedSlices`` (embedding gradients) travel through an allgather of values and indices,
submitted the same way, unless ``sparse_as_dense`` or the step is XLA-compiled (an all-gather has
no static shape there, :mod:`._xla`); ``None`` gradients stay ``None``.
``gradient_predivide_factor`` splits the averaging as Horovod does: scale by 1/f before the sum
and by f/size after it. Compression casts each gradient before its bucket is submitted and back
after the wait. The reduced dense gradients are differentiable (their gradient is all-reduced
the same way: :func:`.differentiable.allreduce_gradient`), like the ops of :mod:`.ops`.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from ..compression import Compression
from ..config import get_config
from ..errors import BlinkflowError
from ..ops import ReduceOp, as_reduce_op
from . import _xla, async_ops, buckets, differentiable, rank_ops, sparse
from .submit_order import SubmitOrder


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
        return ReduceOp.SUM, 1.0 / f, f / rank_ops.size(self.process_set)

    @tf.autograph.experimental.do_not_convert
    def reduce(self, grads: Sequence[Optional[tf.Tensor]]) -> List[Optional[tf.Tensor]]:
        grads = list(grads)
        out: List[Optional[tf.Tensor]] = [None] * len(grads)
        dense_at, sent, contexts, sparse_at = [], [], [], {}
        for i, g in enumerate(grads):
            if g is None:
                continue
            # Inside an XLA-compiled step an all-gather has no static shape: slices go dense there.
            if isinstance(g, tf.IndexedSlices) and not (self.sparse_as_dense or _xla.in_xla_context()):
                sparse.check_op(self.op)
                sparse_at[i] = g
                continue
            t, ctx = self.compression.compress(tf.convert_to_tensor(g))
            dense_at.append(i)
            sent.append(t)
            contexts.append(ctx)
        if not dense_at and not sparse_at:
            return out
        gathered: Dict[int, List[tf.Tensor]] = {}

        def submit_and_wait(*dense):
            reduced, gathered_now = self._submit_and_wait(dict(zip(dense_at, dense)), sparse_at)
            gathered.update(gathered_now)
            return [reduced[i] for i in dense_at]

        if sent:
            op, pre, post = self._scale_factors()

            def gradient(dys, xs, ys):
                return differentiable.allreduce_gradient(dys, op, self.name + ".grad", pre, post, self.process_set)

            reduced = differentiable.custom(lambda xs: submit_and_wait(*xs), gradient)(sent)
            for i, r, ctx in zip(dense_at, reduced, contexts):
                out[i] = self.compression.decompress(r, ctx)
        else:
            submit_and_wait()
        for i, (values, indices) in gathered.items():
            out[i] = tf.IndexedSlices(sparse.reduced_values(values, self.op, rank_ops.size(self.process_set)), indices,
                                      dense_shape=sparse_at[i].dense_shape)
        return out

    def _submit_and_wait(self, dense: Dict[int, tf.Tensor], sparse_at: Dict[int, tf.IndexedSlices]):
        """Submit every bucket, then wait once: ({index: reduced}, {index: [values, indices]})."""
        production_order = sorted(set(dense) | set(sparse_at), reverse=True)  # last variables first
        items = [buckets.Item(i, None, sparse=True) if i in sparse_at
                 else buckets.Item(i, _nbytes(dense[i]), kind=dense[i].dtype.name) for i in production_order]
        units = buckets.plan(items, get_config().bucket_bytes)
        op, pre, post = self._scale_factors()

        def tensors_of(unit):
            if unit.sparse:
                return [sparse_at[unit.indices[0]].values, sparse_at[unit.indices[0]].indices]
            return [dense[i] for i in unit.indices]

        order = None if tf.executing_eagerly() else SubmitOrder()
        pendings = []
        for k, unit in enumerate(units):
            if unit.sparse:
                pendings.append(async_ops.submit_grouped_allgather(tensors_of(unit),
                                                                   f"{self.name}.sparse.{unit.indices[0]}",
                                                                   self.process_set))
            else:
                pendings.append(async_ops.submit_grouped_allreduce(tensors_of(unit), op, f"{self.name}.bucket.{k}",
                                                                   pre, post, self.process_set))
            if order is not None and k + 1 < len(units):
                order.submit_before(pendings[-1].handle.op, tensors_of(units[k + 1]))
        reduced, gathered = {}, {}
        for unit, result in zip(units, async_ops.wait(pendings, f"{self.name}.wait")):
            if unit.sparse:
                gathered[unit.indices[0]] = result
            else:
                reduced.update(zip(unit.indices, result))
        return reduced, gathered


def _nbytes(tensor: tf.Tensor) -> Optional[int]:
    """Bytes ``tensor`` sends, or None when its shape is not static."""
    n = tensor.shape.num_elements()
    return None if n is None else n * tensor.dtype.size
