"""``DistributedGradientTape``: a GradientTape whose ``gradient`` averages over ranks (custom loops)."""
from __future__ import annotations

import tensorflow as tf

from ..compression import Compression
from ..ops import ReduceOp
from .gradients import GradientReducer


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape`` (composition, not a subclass: the tape's internals change
    between TF releases). ``gradient`` returns the gradients all-reduced in one grouped call;
    everything else (``watch``, ``stop_recording``, ...) is the wrapped tape's."""

    def __init__(self, tape: tf.GradientTape, op=ReduceOp.AVERAGE, compression=Compression.none,
                 gradient_predivide_factor: float = 1.0, sparse_as_dense: bool = False,
                 name: str = "DistributedGradientTape"):
        self._tape = tape
        self._reducer = GradientReducer(name, op, compression, gradient_predivide_factor, sparse_as_dense)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat = tf.nest.flatten(grads)
        return tf.nest.pack_sequence_as(grads, self._reducer.reduce(flat))

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._tape, name)
