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

A gradient is identified by its variable, not by which gradients a rank happens to have: the
buckets are planned from the variables (their static sizes), so every rank forms the same buckets
whatever its batch used. A rank whose gradient of a variable is ``None`` contributes zeros (the
rule of Horovod's PyTorch optimizer), so the result is the gradient of the ranks that had one,
over the set's size, on every rank; where no rank had one it is zeros. A variable of a dtype that
cannot have a gradient (integers) stays ``None``.

``IndexedSlices`` (embedding gradients) travel through an allgather of values and indices,
submitted the same way, unless ``sparse_as_dense`` or the step is XLA-compiled (an all-gather has
no static shape there, :mod:`._xla`). Which gradients are sparse must agree across ranks; each
step checks it before submitting (:mod:`.sparse_agreement`) and stops with a
TensorMismatchError naming the variable on every rank where it does not.
A rank outside the process set passes its gradients through unchanged, as Horovod's
optimizers and tape do (the set's ranks average among themselves).
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
from . import _xla, async_ops, buckets, differentiable, rank_ops, sparse, sparse_agreement
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
    def reduce(self, grads: Sequence[Optional[tf.Tensor]], sources: Sequence) -> List[Optional[tf.Tensor]]:
        """The gradients of ``sources`` (variables or tape sources, the same on every rank),
        reduced over the process set."""
        grads, sources = list(grads), list(sources)
        if len(grads) != len(sources):
            raise BlinkflowError(f"{self.name}: {len(grads)} gradients for {len(sources)} variables")
        if self.process_set is not None and self.process_set.included() is False:
            return grads  # Horovod's rule: a rank outside the set keeps its own gradients
        out: List[Optional[tf.Tensor]] = [None] * len(grads)
        all_dense = self.sparse_as_dense or _xla.in_xla_context()
        dense_at, sent, contexts, sparse_at = [], [], [], {}
        for i, (g, source) in enumerate(zip(grads, sources)):
            # Inside an XLA-compiled step an all-gather has no static shape: slices go dense there.
            if isinstance(g, tf.IndexedSlices) and not all_dense:
                sparse.check_op(self.op)
                sparse_at[i] = g
                continue
            if g is None:
                g = absent_gradient(source)
                if g is None:
                    continue
            t, ctx = self.compression.compress(tf.convert_to_tensor(g))
            dense_at.append(i)
            sent.append(t)
            contexts.append(ctx)
        if not dense_at and not sparse_at:
            return out
        agreed = None
        if not all_dense and rank_ops.size(self.process_set) > 1:
            flags = [i in sparse_at for i in range(len(grads))]
            agreed = sparse_agreement.agree(f"{self.name}.sparse_agreement", flags,
                                            [sparse_agreement.variable_label(s, i) for i, s in enumerate(sources)],
                                            self.process_set)
        gathered: Dict[int, List[tf.Tensor]] = {}

        def submit_and_wait(*dense):
            with tf.control_dependencies([] if agreed is None else [agreed]):
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


def absent_gradient(source) -> Optional[tf.Tensor]:
    """What a rank without a gradient for ``source`` contributes: zeros of its shape and dtype, or
    None for a dtype that has no gradients (the same on every rank)."""
    dtype = tf.as_dtype(source.dtype)
    if not (dtype.is_floating or dtype.is_complex):
        return None
    shape = tf.TensorShape(source.shape)
    if shape.is_fully_defined():
        return tf.zeros(shape, dtype)
    return tf.zeros_like(tf.convert_to_tensor(source))
