"""``hvd.elastic`` of ``blinkflow.tensorflow.keras`` (Horovod's ``horovod.tensorflow.keras.elastic``):
``KerasState`` and the callbacks that keep its ``batch`` and ``epoch`` and commit it during
``model.fit``, with Horovod's names; ``state.batch`` counts the batches done in the running epoch,
and a ``fit`` after a reset runs only the batches its interrupted epoch had left.
"""
from __future__ import annotations

import keras

from ...errors import EpochResumedInterrupt
from ..elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State,  # noqa: F401
                       TensorFlowKerasState, TensorFlowState, reform, resets, run)


class KerasState(TensorFlowKerasState):
    """Horovod's ``KerasState``: a :class:`TensorFlowKerasState` of ``model`` (and ``optimizer``)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commit ``state`` every ``batches_per_commit`` batches and at every epoch's end (a commit
    also raises HostsUpdatedInterrupt on every rank when hosts changed)."""

    def __init__(self, state, batches_per_commit: int = 1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        # Counted afresh after every reset, so every rank commits at the same batches.
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class _StopAfterTheResumedEpoch:
    """``model.stop_training`` while only :class:`UpdateBatchStateCallback` asks the ``fit`` to
    stop: true, so Keras ends the ``fit`` after the epoch; a callback that asks to stop as well
    assigns its own ``True`` over it, and the training then ends as that callback wants."""

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<stop after the resumed epoch>"


_STOP_AFTER_THE_RESUMED_EPOCH = _StopAfterTheResumedEpoch()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keep ``state.batch`` at the number of batches done in the epoch that runs (0 at its
    start), and after a reset run only the batches that the interrupted epoch had left.

    A ``fit`` that starts with ``state.batch`` = b > 0 (the last commit was made b batches into
    an epoch) runs ``steps_per_epoch - b`` batches in its first epoch, so that every committed
    batch is trained once. Keras 3's ``fit`` fixes the number of batches of all its epochs when
    it starts, so the shorter epoch is a ``fit`` of its own: after its last batch this callback
    sets ``model.stop_training``, the epoch ends as any other (the epoch-end callbacks run, the
    state is committed) and, when the ``fit`` had epochs left, it ends with
    :class:`~blinkflow.errors.EpochResumedInterrupt`, on which ``hvd.elastic.run`` calls the
    training function again: its ``fit`` starts at the next epoch. A callback that stops the
    training in that epoch (EarlyStopping) ends it as it would.

    When the new ``fit``'s epochs are no longer than ``b`` batches (a job that grew, whose shards
    shrank with it), the interrupted epoch is over: ``state.batch`` goes to 0, ``state.epoch`` (when
    the state has one) to the next epoch, and the ``fit`` ends with EpochResumedInterrupt before
    a batch runs. A ``fit`` whose epochs have no known length (a dataset of unknown length and
    no ``steps_per_epoch``) runs the interrupted epoch whole.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._done_before = 0        # batches of the running epoch done before this fit began
        self._stopped_epoch = None   # the epoch after which this callback stopped the fit

    def on_train_begin(self, logs=None):
        steps = self.params.get("steps")
        self._done_before = int(self.state.batch) if steps else 0
        self._stopped_epoch = None
        if self._done_before and self._done_before >= steps:
            self.state.batch = 0
            if hasattr(self.state, "epoch"):
                self.state.epoch += 1
            raise EpochResumedInterrupt()

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = self._done_before + batch + 1
        if self._done_before and self.state.batch >= self.params["steps"] and not self.model.stop_training:
            self.model.stop_training = _STOP_AFTER_THE_RESUMED_EPOCH

    def on_epoch_end(self, epoch, logs=None):
        if self._done_before and self.model.stop_training is _STOP_AFTER_THE_RESUMED_EPOCH:
            self._stopped_epoch = epoch
        self._done_before = 0
        self.state.batch = 0

    def on_train_end(self, logs=None):
        stopped, self._stopped_epoch = self._stopped_epoch, None
        if (stopped is not None and self.model.stop_training is _STOP_AFTER_THE_RESUMED_EPOCH
                and stopped + 1 < self.params.get("epochs", 0)):
            raise EpochResumedInterrupt()


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keep ``state.epoch`` at the number of epochs done across resets (Keras counts each
    ``fit`` from 0; ``fit(epochs=total - state.epoch)`` resumes where the job was)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # One past the epoch that ended: a reset after state.batch went back to 0 must not run it again.
        self.state.epoch = self.initial_epoch + epoch + 1
