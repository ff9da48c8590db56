"""``import blinkflow.tensorflow.keras as hvd``: Horovod's ``horovod.tensorflow.keras`` names.

The same objects as :mod:`blinkflow.tensorflow` (Keras 3 is TensorFlow's Keras), plus
``hvd.callbacks`` and the Keras ``hvd.elastic``; a Horovod Keras script ports by changing its
import line (``blinkflow.keras`` is the same module, for ``import horovod.keras as hvd``).

Modules, one job each:

``callbacks``  ``hvd.callbacks`` (the classes of ``blinkflow.tensorflow.callbacks``)
``elastic``    ``hvd.elastic`` for Keras: ``KerasState`` and its callbacks
"""
from __future__ import annotations

import blinkflow.tensorflow as _tf_module
from .. import __all__ as _tf_all
from .. import _FROM_RUNTIME
from . import callbacks, elastic  # noqa: F401

# Copy the bindings' names now; the runtime's (init, size, ...) resolve on first use below, so
# importing this module does not start MPI.
globals().update({n: getattr(_tf_module, n) for n in _tf_all
                  if n not in _FROM_RUNTIME and n not in ("callbacks", "elastic")})


def __getattr__(name):
    return getattr(_tf_module, name)


__all__ = list(_tf_all)


def __dir__():
    return sorted(set(globals()) | set(_FROM_RUNTIME))
