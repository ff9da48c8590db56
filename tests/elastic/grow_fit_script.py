"""Horovod's elastic Keras recipe gaining a rank: run by test_grow_fit.py under ``blinkrun -np 2
--host-discovery-script`` (the script prints the SLOTS file); rank 0 offers a third slot at the
start of batch ``GROW_BATCH`` of epoch ``GROW_EPOCH`` by writing ``localhost:3`` there, and the
job then waits for the new rank (checking for host updates, as ``commit()`` does), which joins,
receives the state and trains the rest of the epochs with the others.

``python grow_fit_script.py SLOTS``. Prints per rank:

- ``BEFORE rank <r> weights <sha256>``: a new rank's own initial weights, before it receives any;
- ``TRAIN rank <r> size <n> epoch <e> batch <b> weights <sha256>``: at each (re)start of the
  training function, after the state was synced;
- ``FINAL rank <r> size <n> resets <k> epoch <e> iterations <optimizer steps> weights <sha256>``.
"""
import hashlib
import sys
import time

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras  # noqa: E402

import blinkflow.tensorflow.keras as hvd  # noqa: E402

EPOCHS, STEPS, BATCH, GROW_EPOCH, GROW_BATCH = 4, 4, 8, 1, 2
SLOTS = sys.argv[1]

hvd.init()
first = hvd.rank()
rng = np.random.default_rng(7)
X = rng.normal(size=(STEPS * BATCH * EPOCHS * 3, 4)).astype("float32")  # every rank has data for every epoch
Y = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")

keras.utils.set_random_seed(1 + first)   # every rank starts from its own weights: sync must make them equal
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")


def digest() -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in model.get_weights())).hexdigest()


if hvd.size() == 3:   # only a rank that joined starts in a job of three
    print(f"BEFORE rank {first} weights {digest()}", flush=True)


class OfferASlotAndWait(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if state.epoch == GROW_EPOCH and batch == GROW_BATCH and hvd.size() == 2:
            if hvd.rank() == 0:
                with open(SLOTS, "w") as f:
                    f.write("localhost:3\n")
            while True:    # every rank alike: until HostsUpdatedInterrupt
                time.sleep(0.2)
                state.check_host_updates()


state = hvd.elastic.KerasState(model, batch=0, epoch=0)
callbacks = [OfferASlotAndWait(), hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.CommitStateCallback(state)]


@hvd.elastic.run
def train(state):
    print(f"TRAIN rank {hvd.rank()} size {hvd.size()} epoch {state.epoch} batch {state.batch} weights {digest()}",
          flush=True)
    rows = np.arange(len(X)) % hvd.size() == hvd.rank()
    state.model.fit(X[rows], Y[rows], batch_size=BATCH, steps_per_epoch=STEPS, epochs=EPOCHS - state.epoch,
                    callbacks=callbacks, verbose=0, shuffle=False)


train(state)
print(f"FINAL rank {hvd.rank()} size {hvd.size()} resets {hvd.elastic.resets()} epoch {state.epoch} "
      f"iterations {int(model.optimizer.iterations.numpy())} weights {digest()}", flush=True)
