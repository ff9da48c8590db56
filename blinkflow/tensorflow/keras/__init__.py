"""``import blinkflow.tensorflow.keras as hvd``: Horovod's ``horovod.tensorflow.keras`` names, and
the Keras glue of the TensorFlow bindings.

The same objects as :mod:`blinkflow.tensorflow` (Keras 3 is TensorFlow's Keras), plus
``hvd.callbacks`` and the Keras ``hvd.elastic``; a Horovod Keras script ports by changing its
import line (``blinkflow.keras`` is the same module, for ``import horovod.keras as hvd``). The
bindings' names are looked up in :mod:`blinkflow.tensorflow` when first used, so the bindings
themselves can import the glue below while they load.

Modules, one job each:

``callbacks``        Keras 3 callbacks (Horovod's names and behaviour), also ``blinkflow.callbacks``
``best_checkpoint``  ``BestModelCheckpoint``: the best model, written by rank 0
``fit_alignment``    ``model.fit`` aligning its epochs across ranks
``uneven_epochs``    epochs of different lengths on different ranks in ``model.fit``
``keras2_calls``     Keras 2 calls of Horovod's examples, accepted under Keras 3
``elastic``          ``hvd.elastic`` for Keras: ``KerasState`` and its callbacks
"""
from __future__ import annotations

import importlib

from . import callbacks, elastic  # noqa: F401


def _bindings():
    return importlib.import_module("blinkflow.tensorflow")


def __getattr__(name):
    # ``__all__`` too: ``from blinkflow.tensorflow.keras import *`` takes the bindings' names.
    if name == "__all__":
        return list(_bindings().__all__)
    value = getattr(_bindings(), name)
    if not name.startswith("_"):
        globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(dir(_bindings())))
