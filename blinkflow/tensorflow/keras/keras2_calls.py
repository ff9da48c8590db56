"""Keras 2 calls that Horovod's TF2 examples make on Keras's own objects, accepted under Keras 3.

Horovod's ``tensorflow2_mnist.py`` and ``tensorflow2_synthetic_benchmark.py`` broadcast a plain
Keras optimizer's state with ``hvd.broadcast_variables(opt.variables(), root_rank=0)``. In
Keras 2 ``variables`` was a method; Keras 3 made it a property holding a list, so the call fails
with "'list' object is not callable" before blinkflow is reached. Importing
``blinkflow.tensorflow`` makes every Keras optimizer class's ``variables`` return a
:class:`~..optimizer.VariableList`: a list (what Keras 3 code expects) that returns itself when
called (what Keras 2 code calls), so a Horovod script ports by its import line alone.

The property is wrapped once per class that defines one (Keras's base optimizer, and the wrappers
with their own: loss scaling, multi-optimizers); blinkflow's own DistributedOptimizer already
returns a VariableList.
"""
from __future__ import annotations

import keras

from ..optimizer import VariableList

_WRAPPED = "_blinkflow_callable_variables"


def _callable(prop: property) -> property:
    def variables(self):
        return VariableList(prop.fget(self))

    variables.__doc__ = prop.__doc__
    wrapped = property(variables)
    setattr(wrapped.fget, _WRAPPED, True)
    return wrapped


def accept_keras2_optimizer_variables() -> None:
    """Make ``optimizer.variables()`` work on every Keras optimizer class (idempotent)."""
    classes = [c for c in keras.optimizers.Optimizer.__mro__ if "variables" in vars(c)]
    classes += [c for c in vars(keras.optimizers).values()
                if isinstance(c, type) and issubclass(c, keras.optimizers.Optimizer) and "variables" in vars(c)]
    for cls in dict.fromkeys(classes):
        prop = vars(cls)["variables"]
        if isinstance(prop, property) and not getattr(prop.fget, _WRAPPED, False):
            setattr(cls, "variables", _callable(prop))


accept_keras2_optimizer_variables()
