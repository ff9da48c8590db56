"""``hvd.callbacks`` for ``import blinkflow.tensorflow.keras as hvd`` (the same classes as
:mod:`blinkflow.tensorflow.callbacks`)."""
from ..callbacks import (AlignEpochsCallback, BestModelCheckpoint, BroadcastGlobalVariablesCallback,  # noqa: F401
                         LearningRateScheduleCallback, LearningRateWarmupCallback, MetricAverageCallback)

__all__ = ["AlignEpochsCallback", "BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback"]
