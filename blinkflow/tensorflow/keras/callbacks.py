"""``hvd.callbacks`` for ``import blinkflow.tensorflow.keras as hvd`` (the same classes as
:mod:`blinkflow.tensorflow.callbacks`)."""
from ..callbacks import (AlignEpochsCallback, BroadcastGlobalVariablesCallback,  # noqa: F401
                         LearningRateScheduleCallback, LearningRateWarmupCallback, MetricAverageCallback)

__all__ = ["AlignEpochsCallback", "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback"]
