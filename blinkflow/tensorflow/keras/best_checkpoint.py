"""``hvd.callbacks.BestModelCheckpoint``: Horovod's checkpoint of the best model, written by rank 0.

Every rank trains the same weights, so one copy is enough, and ranks writing one path at once
would corrupt it: rank 0 alone saves, and only when the monitored value improved (Keras's
``save_best_only=True``). The other ranks take part in nothing (saving is local), so they never wait.

Horovod's arguments, in Horovod's order; ``filepath`` comes last and may be left out at
construction, as Horovod's Spark estimator sets it afterwards (``callback.filepath = ...``):
``fit`` then refuses to start on every rank until it is set.
"""
from __future__ import annotations

import keras

from ...errors import InvalidArgumentError
from .. import crossing

#: What Keras wants a path to end with, by ``save_weights_only``: the check a path given at
#: construction passes, and the one a path set later is held to when training begins.
SUFFIXES = {True: (".weights.h5",), False: (".keras", ".h5")}


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Save the model (or its weights) to ``filepath`` on rank 0 whenever ``monitor`` improves."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto", save_freq="epoch",
                 filepath=None):
        later = filepath is None
        # Keras checks a path's suffix when it is given; a path set later is checked in on_train_begin.
        super().__init__(filepath=SUFFIXES[bool(save_weights_only)][0] if later else filepath, monitor=monitor,
                         verbose=verbose, save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)
        if later:
            self.filepath = None

    def on_train_begin(self, logs=None):
        suffixes = SUFFIXES[bool(self.save_weights_only)]
        if self.filepath is None:
            raise InvalidArgumentError("BestModelCheckpoint has no filepath: pass filepath=... or set "
                                       "callback.filepath before fit (Horovod's Spark estimator sets it)")
        if not str(self.filepath).endswith(suffixes):
            raise InvalidArgumentError(f"BestModelCheckpoint filepath {self.filepath!r} must end in "
                                       f"{' or '.join(suffixes)} (save_weights_only={self.save_weights_only})")
        super().on_train_begin(logs)

    def on_train_batch_end(self, batch, logs=None):
        if crossing.runtime().rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if crossing.runtime().rank() == 0:
            super().on_epoch_end(epoch, logs)
