"""Single-process checks of elastic resumption in ``model.fit`` (Horovod's Keras recipe under
``hvd.elastic.run``): after a reset in the middle of an epoch, the first epoch runs only the
batches that were left, so the job's optimizer steps are exactly epochs x steps_per_epoch.

The reset here is a HostsUpdatedInterrupt raised at a batch (what a commit raises when a host
is offered) with a reset that changes nothing, so the loop and the callbacks run as in a job,
without MPI; tests/elastic counts the same across a real loss and a real gain."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from blinkflow.elastic.run import run_fn  # noqa: E402
from blinkflow.elastic.state import ObjectState  # noqa: E402
from blinkflow.errors import HostsUpdatedInterrupt  # noqa: E402
from blinkflow.tensorflow.keras import elastic  # noqa: E402

EPOCHS, STEPS, BATCH = 4, 5, 2


def _model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


class _Recorder(keras.callbacks.Callback):
    """Every trained batch as (state.epoch, batch index in its fit); every epoch end as the epoch
    that ended (it runs before UpdateEpochStateCallback);
    a HostsUpdatedInterrupt at the start of the fit's batch ``b`` of epoch ``e`` for each ``(e, b)``
    of ``at``, in turn."""

    def __init__(self, state, at=()):
        super().__init__()
        self.state, self.at = state, list(at)
        self.batches, self.epoch_ends = [], []

    def on_train_batch_begin(self, batch, logs=None):
        if self.at and self.at[0] == (self.state.epoch, batch):
            self.at.pop(0)
            raise HostsUpdatedInterrupt()

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((self.state.epoch, batch))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ends.append(self.state.epoch)


def _train(at=(), state_batch=0, state_epoch=0, steps=STEPS, extra=()):
    """Run the recipe; returns (model, state, recorder, how many times the function ran)."""
    model = _model()
    state = ObjectState(bcast_object=lambda obj: obj, get_rank=lambda: 0, batch=state_batch, epoch=state_epoch)
    recorder = _Recorder(state, at)
    callbacks = [recorder, elastic.UpdateEpochStateCallback(state), elastic.UpdateBatchStateCallback(state),
                 elastic.CommitStateCallback(state), *extra]
    x = np.linspace(-1, 1, steps * BATCH * 3, dtype="float32").reshape(-1, 3)   # one epoch of batches
    y = x.sum(axis=1, keepdims=True)
    calls = []

    def train(state):
        calls.append((state.epoch, state.batch))
        model.fit(x, y, batch_size=BATCH, steps_per_epoch=steps, epochs=EPOCHS - state.epoch,
                  callbacks=callbacks, verbose=0, shuffle=False)

    run_fn(train, reset=lambda: None, reset_limit=5)(state)
    return model, state, recorder, calls


def test_a_reset_mid_epoch_runs_the_batches_left_then_whole_epochs():
    model, state, recorder, calls = _train(at=[(1, 3)])
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS   # 20, not 23
    # 3 batches of epoch 1 before the reset, its other 2 after it, then epochs 2 and 3 whole.
    per_epoch = [sum(1 for e, _ in recorder.batches if e == epoch) for epoch in range(EPOCHS)]
    assert per_epoch == [STEPS] * EPOCHS, recorder.batches
    assert recorder.epoch_ends == [0, 1, 2, 3], recorder.epoch_ends   # each epoch ends once
    assert calls == [(0, 0), (1, 3), (2, 0)], calls   # the reset, then the fit after the short epoch
    assert (state.epoch, state.batch) == (EPOCHS, 0)


def test_a_second_reset_in_the_resumed_epoch_resumes_it_again():
    # 3 batches of epoch 1, a reset; 1 of the 2 left, a reset; the last one; epochs 2 and 3.
    model, state, recorder, calls = _train(at=[(1, 3), (1, 1)])
    assert calls == [(0, 0), (1, 3), (1, 4), (2, 0)], calls
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS
    assert recorder.epoch_ends == [0, 1, 2, 3] and (state.epoch, state.batch) == (EPOCHS, 0)


def test_state_batch_counts_the_batches_done_in_the_running_epoch():
    _, state, _, _ = _train(at=[(2, 1)])
    assert (state.epoch, state.batch) == (EPOCHS, 0)
    state = ObjectState(bcast_object=lambda obj: obj, get_rank=lambda: 0, batch=0, epoch=0)
    seen = []

    class Watch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(state.batch)

    model = _model()
    x = np.zeros((STEPS * BATCH, 3), "float32")
    model.fit(x, x[:, :1], batch_size=BATCH, epochs=2, verbose=0,
              callbacks=[elastic.UpdateBatchStateCallback(state), Watch()])
    assert seen == list(range(1, STEPS + 1)) * 2 and state.batch == 0, seen


def test_a_reset_in_the_last_epoch_ends_the_training_without_another_fit():
    model, state, recorder, calls = _train(at=[(EPOCHS - 1, 2)])
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS
    assert calls == [(0, 0), (EPOCHS - 1, 2)] and state.epoch == EPOCHS, calls


def test_a_callback_that_stops_in_the_resumed_epoch_ends_the_training():
    class StopAtEpochEnd(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0 and calls_seen[0] == 2:
                self.model.stop_training = True

    calls_seen = [0]

    class Count(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            calls_seen[0] += 1

    model, state, _, calls = _train(at=[(1, 3)], extra=(Count(), StopAtEpochEnd()))
    assert calls == [(0, 0), (1, 3)], calls   # no third fit: the training stopped as asked
    assert int(model.optimizer.iterations.numpy()) == 2 * STEPS and state.epoch == 2


def test_an_epoch_that_had_no_batches_left_is_over_before_a_batch_runs():
    # A job that grew: 4 of the old epoch's batches were done, the new epochs have 3.
    model, state, recorder, calls = _train(state_batch=4, state_epoch=1, steps=3)
    assert calls == [(1, 4), (2, 0)], calls
    assert int(model.optimizer.iterations.numpy()) == (EPOCHS - 2) * 3
    assert recorder.epoch_ends == [2, 3] and (state.epoch, state.batch) == (EPOCHS, 0)
