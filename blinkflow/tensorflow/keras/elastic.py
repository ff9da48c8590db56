"""``hvd.elastic`` of ``blinkflow.tensorflow.keras``: Horovod's Keras elastic names; using any
raises ``NotImplementedError`` naming the alternative (see :mod:`blinkflow.tensorflow.elastic`)."""
from __future__ import annotations

from ..elastic import WHY, ObjectState, State, TensorFlowKerasState, TensorFlowState, run  # noqa: F401
from ..elastic import Unsupported


class KerasState(TensorFlowKerasState):
    pass


class CommitStateCallback(Unsupported):
    pass


class UpdateBatchStateCallback(Unsupported):
    pass


class UpdateEpochStateCallback(Unsupported):
    pass
