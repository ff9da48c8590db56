"""Horovod's elastic Keras recipe under ULFM that loses rank 2 at a batch in the middle of
``model.fit``; the survivors roll back to the last commit, re-form, sync and finish the epochs.

- ``python fit_script.py`` (test_elastic_fit.py, 3 ranks): rank 2 SIGKILLs itself there;
- ``python fit_script.py MARKER`` (tests/multihost, 2 + 2 ranks on hosts ``bfa``, ``bfb``): rank 2
  writes the file MARKER there and waits, while the test takes its host away (its network, then
  every process on it);
- ``python fit_script.py MARKER LOGDIR`` (tests/multihost, the hosts cut apart while every process
  lives): rank 2 writes MARKER and trains on, every batch from then on taking 0.5 s longer so the
  cut falls inside ``fit``; every rank also writes its lines, and the error it ends with, to
  ``LOGDIR/rank.<first rank>`` (the file system is shared; a cut-off host's output cannot reach
  blinkrun).

Prints per rank:

- ``EPOCHLOSS rank <first rank> epoch <e> size <n> loss <x>``: the loss on the whole data set
  after each epoch (the weights are equal on every rank, so it is too);
- ``FINAL rank <first rank> resets <k> epoch <e> weights <sha256>``: the final weights' digest;
- ``ITERATIONS rank <first rank> <n>``: the optimizer's steps (``optimizer.iterations``) at the end.
"""
import hashlib
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras  # noqa: E402

import blinkflow.tensorflow.keras as hvd  # noqa: E402

EPOCHS, STEPS, BATCH = 6, 4, 8
LOSS_EPOCH, LOSS_BATCH, VICTIM = 2, 2, 2
MARKER = sys.argv[1] if len(sys.argv) > 1 else None
LOGDIR = sys.argv[2] if len(sys.argv) > 2 else None

hvd.init()
first = hvd.rank()


def say(line: str) -> None:
    print(line, flush=True)
    if LOGDIR is not None:
        with open(os.path.join(LOGDIR, f"rank.{first}"), "a") as f:
            f.write(line + "\n")

rng = np.random.default_rng(7)
X = rng.normal(size=(STEPS * BATCH * hvd.size(), 4)).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")

keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")


def whole_loss() -> float:
    return float(np.mean((model(X, training=False).numpy() - Y) ** 2))


class Loss(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if LOGDIR is not None and MARKER is not None and os.path.exists(MARKER):
            time.sleep(0.5)
        if first != VICTIM or state.epoch != LOSS_EPOCH or batch != LOSS_BATCH:
            return
        if MARKER is None:
            os.kill(os.getpid(), signal.SIGKILL)
        with open(MARKER + ".tmp", "w"):
            pass
        os.replace(MARKER + ".tmp", MARKER)
        if LOGDIR is None:
            time.sleep(600)   # the test takes this host away meanwhile


class EpochLoss(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        say(f"EPOCHLOSS rank {first} epoch {state.epoch} size {hvd.size()} loss {whole_loss():.8f}")


state = hvd.elastic.KerasState(model, batch=0, epoch=0)
callbacks = [Loss(), hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
             hvd.elastic.CommitStateCallback(state), EpochLoss()]


@hvd.elastic.run
def train(state):
    # This rank's block of STEPS batches, whatever the job's size now: each epoch is the whole block
    # (where a shard held fewer batches than the epochs ask for, Keras would end epochs early).
    rows = np.arange(len(X)) // (STEPS * BATCH) == hvd.rank()
    state.model.fit(X[rows], Y[rows], batch_size=BATCH, steps_per_epoch=STEPS, epochs=EPOCHS - state.epoch,
                    callbacks=callbacks, verbose=0, shuffle=False)


say(f"EPOCHLOSS rank {first} epoch 0 size {hvd.size()} loss {whole_loss():.8f}")
try:
    train(state)
except Exception as error:
    say(f"ERROR rank {first} {type(error).__name__}: {error}")
    raise
weights = b"".join(np.ascontiguousarray(w).tobytes() for w in model.get_weights())
say(f"FINAL rank {first} resets {hvd.elastic.resets()} epoch {state.epoch} "
    f"weights {hashlib.sha256(weights).hexdigest()}")
say(f"ITERATIONS rank {first} {int(model.optimizer.iterations.numpy())}")
hvd.shutdown()
sys.exit(0)
