"""``hvd.elastic`` of ``blinkflow.tensorflow.keras`` (Horovod's ``horovod.tensorflow.keras.elastic``):
``KerasState`` and the callbacks that keep its ``batch`` and ``epoch`` and commit it during
``model.fit``, with Horovod's semantics.
"""
from __future__ import annotations

import keras

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


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keep ``state.batch`` at the last batch done, and after a reset run only the batches of
    the epoch that were left (``steps_per_epoch`` minus ``state.batch``)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


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
