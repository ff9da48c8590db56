"""``hvd.callbacks`` for ``import blinkflow.tensorflow.keras as hvd`` (the same classes as
:mod:`blinkflow.tensorflow.callbacks`)."""
from ..callbacks import (AlignEpochsCallback, BroadcastGlobalVariablesCallback, LearningRateScheduleCallback,  # noqa: F401
                         LearningRateWarmupCallback, MetricAverageCallback)

__all__ = ["AlignEpochsCallback", "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
           "LearningRateWarmupCallback"]
