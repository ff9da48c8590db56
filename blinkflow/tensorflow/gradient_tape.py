"""``DistributedGradientTape``: a GradientTape whose ``gradient`` averages over ranks (custom loops)."""
from __future__ import annotations

import tensorflow as tf

from ..compression import Compression
from ..ops import ReduceOp
from ._deprecated import warn_once
from .gradients import GradientReducer
from .local_gradients import layer_variables


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape`` (composition, not a subclass: the tape's internals change
    between TF releases). ``gradient`` returns the gradients all-reduced in one grouped call
    over ``process_set`` (default: every rank), each paired with the same source's gradient on
    the other ranks (a rank whose gradient is ``None`` contributes zeros: :mod:`.gradients`; a
    rank outside ``process_set`` gets its own gradients back, as in Horovod); everything else
    (``watch``, ``stop_recording``, ...) is the wrapped tape's. Horovod's
    ``register_local_source(variable)`` keeps a source's gradient local (divided by the set's size
    with ``scale_local_gradients``). ``device_dense``,
    ``device_sparse``, ``groups`` and ``num_groups`` are accepted for Horovod's callers: the
    step's gradients are one group, fused by the runtime."""

    def __init__(self, tape: tf.GradientTape, op=ReduceOp.AVERAGE, compression=Compression.none,
                 gradient_predivide_factor: float = 1.0, sparse_as_dense: bool = False,
                 name: str = "DistributedGradientTape", process_set=None, device_dense="", device_sparse="",
                 num_groups=0, groups=None, scale_local_gradients: bool = True):
        if num_groups:
            warn_once("DistributedGradientTape.num_groups", "DistributedGradientTape: `num_groups` is deprecated "
                      "(Horovod 0.21); pass groups=")
        self._tape = tape
        self._reducer = GradientReducer(name, op, compression, gradient_predivide_factor, sparse_as_dense,
                                        process_set, scale_local_gradients)

    def register_local_source(self, source) -> None:
        """Keep ``source``'s gradient on this rank (Horovod's): it is not all-reduced."""
        self._reducer.local.add(source)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        reduced = self._reducer.reduce(tf.nest.flatten(grads), tf.nest.flatten(sources))
        return tf.nest.pack_sequence_as(grads, reduced)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._tape, name)


def PartialDistributedGradientTape(gradtape, op=ReduceOp.AVERAGE, compression=Compression.none,
                                   gradient_predivide_factor: float = 1.0, sparse_as_dense: bool = False,
                                   process_set=None, local_layers=None, scale_local_gradients: bool = True,
                                   **horovod_kwargs) -> DistributedGradientTape:
    """Horovod's ``PartialDistributedGradientTape``: a DistributedGradientTape whose
    ``local_layers`` (Keras layers) keep their gradients local."""
    tape = DistributedGradientTape(gradtape, op, compression, gradient_predivide_factor, sparse_as_dense,
                                   process_set=process_set, scale_local_gradients=scale_local_gradients,
                                   **horovod_kwargs)
    for variable in layer_variables(local_layers):
        tape.register_local_source(variable)
    return tape
