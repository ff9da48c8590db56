"""Keras 3 callbacks for data-parallel training (Horovod's names and behaviour).

They talk to the optimizer through Keras 3's ``learning_rate`` (a variable, so new values reach
an already traced train step) and read the model's and optimizer's ``variables`` properties.

Ranks whose shards have different numbers of batches stay in step: the callbacks that
communicate at an epoch's end (:class:`BroadcastGlobalVariablesCallback`,
:class:`MetricAverageCallback`, or :class:`AlignEpochsCallback` alone) first wait, joined, for
every rank's epoch to end and take the state of the rank that ran the most batches
(:mod:`.uneven_epochs`).
"""
from __future__ import annotations

import logging
from typing import Callable, Optional, Union

import keras
import numpy as np

from ...ops import ReduceOp
from .. import crossing
from . import uneven_epochs
from .best_checkpoint import BestModelCheckpoint  # noqa: F401  (Horovod's name, in Horovod's module)
from .._compat import learning_rate_of
from ..local_gradients import LocalSources
from ..variables import broadcast_variables

log = logging.getLogger(__name__)


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Make every rank's model and optimizer state equal to ``root_rank``'s.

    Runs at the end of the first batch, once the optimizer's slot variables exist, and again on
    the first batch of any later ``fit``; ranks that started from different weights are identical
    from then on. ``local_variables`` (Horovod's), or :meth:`register_local_var` later: variables
    each rank keeps its own of (model-parallel parts), left out. ``device`` is accepted for
    Horovod's signature. At each epoch's end it aligns the ranks' epochs (:mod:`.uneven_epochs`).
    """

    def __init__(self, root_rank: int = 0, device: str = "", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self._local = LocalSources()
        if local_variables is not None:
            if _is_variable(local_variables):
                local_variables = [local_variables]
            local_variables = list(local_variables)
            strangers = [type(v).__name__ for v in local_variables if not _is_variable(v)]
            if strangers:
                raise ValueError(f"local_variables must be variables (tf.Variable or keras.Variable), got {strangers}")
            for variable in local_variables:
                self.register_local_var(variable)
        self.broadcast_done = False

    def register_local_var(self, var) -> None:
        """Leave ``var`` out of the broadcast: each rank keeps its own value (Horovod's)."""
        self._local.add(var)

    def on_train_begin(self, logs=None):
        self.broadcast_done = False
        uneven_epochs.start_training(self.model)
        if self._local:
            uneven_epochs.keep_local(self.model, self._local.holds)

    def on_epoch_end(self, epoch, logs=None):
        uneven_epochs.align(self.model, epoch)

    def on_train_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        shared = [v for v in self.model.variables if not self._local.holds(v)]
        broadcast_variables(shared, self.root_rank, name="BroadcastGlobalVariables.model")
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.variables:
            broadcast_variables(optimizer.variables, self.root_rank, name="BroadcastGlobalVariables.optimizer")
        self.broadcast_done = True


def _is_variable(value) -> bool:
    import tensorflow as tf

    return isinstance(value, (tf.Variable, keras.Variable))


class MetricAverageCallback(keras.callbacks.Callback):
    """Average the epoch's metrics (``logs``) over ranks, in place, so that every rank and every
    later callback (History, checkpoints, ReduceLROnPlateau) sees the same numbers. Put it before
    the callbacks that read metrics. ``device`` is accepted for Horovod's signature."""

    def __init__(self, device: str = ""):
        super().__init__()
        self.device = device

    def on_train_begin(self, logs=None):
        uneven_epochs.start_training(self.model)

    def on_epoch_end(self, epoch, logs=None):
        uneven_epochs.align(self.model, epoch)  # every rank's epoch has ended, whatever its batches
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.number))
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        rt = crossing.runtime()
        averaged = rt.synchronize(rt.allreduce_async(values, op=ReduceOp.AVERAGE, name=f"MetricAverage.{epoch}"))
        for key, value in zip(keys, np.asarray(averaged)):
            logs[key] = float(value)


class AlignEpochsCallback(keras.callbacks.Callback):
    """At each epoch's end, wait (joined) until every rank's epoch has ended, then give every rank
    the state of the rank that ran the most batches (:mod:`.uneven_epochs`). The two callbacks
    above do this too; this one is for a ``fit`` that uses neither."""

    def on_train_begin(self, logs=None):
        uneven_epochs.start_training(self.model)

    def on_epoch_end(self, epoch, logs=None):
        uneven_epochs.align(self.model, epoch)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set ``learning_rate = initial_lr * multiplier(epoch)`` for ``start_epoch <= epoch < end_epoch``.

    ``multiplier`` is a number or a function of the (fractional) epoch. With ``staircase`` the rate
    changes at epoch starts, otherwise at every batch with ``epoch + batch / steps_per_epoch``.
    ``initial_lr=None`` takes the optimizer's rate at the start of training.

    ``momentum_correction`` (Horovod's trick of scaling momentum with the rate) is not applied:
    Keras 3 compiles ``momentum`` into the train step as a Python float, so changing it later has
    no effect; a warning says so when the optimizer has momentum.
    """

    def __init__(self, initial_lr: Optional[float] = None, multiplier: Union[float, Callable] = 1.0,
                 start_epoch: int = 0, end_epoch: Optional[int] = None, staircase: bool = True,
                 momentum_correction: bool = True, steps_per_epoch: Optional[int] = None, verbose: int = 0):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch, m=float(multiplier): m)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _active(self, epoch) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set(self, epoch: float) -> None:
        self.model.optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = learning_rate_of(self.model.optimizer)
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if not self.staircase and not self.steps_per_epoch:
            raise ValueError("LearningRateScheduleCallback(staircase=False) needs steps_per_epoch "
                             "(fit could not tell it: pass steps_per_epoch)")
        if self.momentum_correction and float(getattr(self.model.optimizer, "momentum", 0.0) or 0.0) > 0:
            log.warning("blinkflow: momentum_correction is not applied with Keras 3 optimizers")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._active(epoch):
            self._set(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if not self.staircase and self._active(self.current_epoch):
            self._set(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = learning_rate_of(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the rate from ``initial_lr / size`` to ``initial_lr`` over ``warmup_epochs`` (Goyal et
    al., "Accurate, Large Minibatch SGD"): scale the rate by ``size`` only gradually, at every batch.
    The epoch number is shifted by one batch so that epoch ``e`` ends at exactly
    ``initial_lr / size * (e * (size - 1) / warmup_epochs + 1)`` with ``e`` epochs done."""

    def __init__(self, initial_lr: Optional[float] = None, warmup_epochs: int = 5, momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None, verbose: int = 0):
        self.warmup_epochs = warmup_epochs

        def multiplier(epoch):
            size = crossing.runtime().size()
            epoch = epoch + 1.0 / self.steps_per_epoch
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch,
                         verbose=verbose)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose > 0 and crossing.runtime().rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{learning_rate_of(self.model.optimizer):g}.")


__all__ = ["AlignEpochsCallback", "BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback"]
