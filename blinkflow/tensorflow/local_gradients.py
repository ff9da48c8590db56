"""Gradients that stay on their rank: Horovod's ``register_local_var`` (DistributedOptimizer),
``register_local_source`` (DistributedGradientTape) and the ``Partial*`` wrappers' local layers.

Model-parallel parts of a model (a layer each rank keeps for itself) must not be averaged with
the other ranks'. Their gradients skip the all-reduce; with ``scale_local_gradients`` (Horovod's
default) they are divided by the process set's size instead, so that the learning rate, scaled
by the number of ranks for the shared gradients, means the same for them (Horovod pull 3695). The gradient reducer (:mod:`.gradients`) asks
:meth:`LocalSources.holds` of each source and keeps a local one as :meth:`LocalSources.kept`
returns it.
"""
from __future__ import annotations

from typing import List

import tensorflow as tf

from . import rank_ops


class LocalSources:
    """The variables (or tape sources) registered as local, by identity."""

    def __init__(self, scale_local_gradients: bool = True, process_set=None):
        self.scale = bool(scale_local_gradients)
        self.process_set = process_set
        self._ids = set()

    def add(self, variable) -> None:
        self._ids.add(id(variable))
        value = getattr(variable, "value", None)  # a Keras variable wraps a tf.Variable: either may arrive
        if value is not None and not callable(value):
            self._ids.add(id(value))

    def holds(self, variable) -> bool:
        """Whether ``variable`` (or the tf.Variable a Keras variable wraps) was added."""
        return id(variable) in self._ids

    def __bool__(self) -> bool:
        return bool(self._ids)

    def kept(self, grad):
        """A local gradient as it stays on this rank: divided by the set's size with
        ``scale_local_gradients``, else itself."""
        if not self.scale or grad is None:
            return grad
        n = rank_ops.size(self.process_set)
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
        return grad / tf.cast(n, grad.dtype)


def layer_variables(local_layers) -> List:
    """The trainable variables of ``local_layers`` (a Keras layer or a list of them), Horovod's
    ``Partial*`` argument."""
    import keras

    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    local_layers = list(local_layers)
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("all local_layers must be Keras layers (keras.layers.Layer)")
    return [v for layer in local_layers for v in layer.trainable_weights]
