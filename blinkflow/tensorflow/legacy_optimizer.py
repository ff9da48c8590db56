"""``DistributedOptimizer`` for TF1's ``tf.compat.v1.train.Optimizer`` (graph mode, Session runs):
Horovod's ``_DistributedOptimizer``. ``compute_gradients`` returns the gradients all-reduced in
one grouped call over ``process_set`` (a rank outside the set keeps its own, as in Horovod);
``apply_gradients``, slots and variables are the wrapped optimizer's.
``DistributedOptimizer(tf.compat.v1.train.XOptimizer(...))`` returns one of these.
"""
from __future__ import annotations

import tensorflow as tf

from ..compression import Compression
from ..ops import ReduceOp
from .gradients import GradientReducer


class LegacyDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Wrap a ``tf.compat.v1.train.Optimizer``; arguments as :class:`DistributedOptimizer`'s, plus
    TF1's ``use_locking``. ``backward_passes_per_step`` > 1 is Keras-only here."""

    def __init__(self, optimizer, op=ReduceOp.AVERAGE, compression=Compression.none, backward_passes_per_step=1,
                 gradient_predivide_factor=1.0, sparse_as_dense=False, name=None, average_aggregated_gradients=False,
                 process_set=None, scale_local_gradients=True, use_locking=False, device_dense="", device_sparse="",
                 num_groups=0, groups=None):
        if int(backward_passes_per_step) != 1:
            raise NotImplementedError("backward_passes_per_step > 1 with a tf.compat.v1.train optimizer is not "
                                      "supported; accumulate gradients yourself, or use a Keras optimizer")
        name = name or f"Distributed{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._reducer = GradientReducer(name, op, compression, gradient_predivide_factor, sparse_as_dense,
                                        process_set, scale_local_gradients)
        self.process_set = process_set

    def register_local_var(self, var) -> None:
        """Keep ``var``'s gradient on this rank (Horovod's): it is not all-reduced."""
        self._reducer.local.add(var)

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._reducer.reduce(list(grads), list(variables)), variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)
