"""``hvd.elastic`` of ``blinkflow.tensorflow.keras``: Horovod's Keras elastic names; using any
raises ``NotImplementedError`` naming the alternative (see :mod:`blinkflow.tensorflow.elastic`)."""
from __future__ import annotations

from ..elastic import WHY, ObjectState, State, TensorFlowKerasState, TensorFlowState, run  # noqa: F401
from ..elastic import _unsupported


class KerasState(TensorFlowKerasState):
    pass


class _UnsupportedCallback:
    def __init__(self, *args, **kwargs):
        _unsupported(f"hvd.elastic.{type(self).__name__}")


class CommitStateCallback(_UnsupportedCallback):
    pass


class UpdateBatchStateCallback(_UnsupportedCallback):
    pass


class UpdateEpochStateCallback(_UnsupportedCallback):
    pass
