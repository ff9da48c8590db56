"""``hvd.elastic`` of ``blinkflow.tensorflow.keras``: Horovod's Keras elastic names; using any
raises ``NotImplementedError`` naming the alternative (see :mod:`blinkflow.tensorflow.elastic`)."""
from __future__ import annotations

from ..elastic import WHY, ObjectState, State, TensorFlowKerasState, TensorFlowState, run  # noqa: F401
from ..elastic import Unsupported


class KerasState(TensorFlowKerasState):
    """Horovod's Keras elastic state: constructing one raises (see :mod:`blinkflow.tensorflow.elastic`)."""


class CommitStateCallback(Unsupported):
    """Horovod's elastic Keras callback: constructing one raises (see :mod:`blinkflow.tensorflow.elastic`)."""


class UpdateBatchStateCallback(Unsupported):
    """Horovod's elastic Keras callback: constructing one raises (see :mod:`blinkflow.tensorflow.elastic`)."""


class UpdateEpochStateCallback(Unsupported):
    """Horovod's elastic Keras callback: constructing one raises (see :mod:`blinkflow.tensorflow.elastic`)."""
