"""Horovod's elastic Keras recipe (``tensorflow2_keras_mnist_elastic.py``) with the import changed,
on handwritten digits (8x8 images; data/digits.csv.gz, no download).

    mpirun --with-ft ulfm -np 4 python examples/elastic_keras.py
    BLINKFLOW_ELASTIC_MIN_NP=2 mpirun --with-ft ulfm -x BLINKFLOW_ELASTIC_MIN_NP -np 4 python examples/elastic_keras.py

Kill a rank while it trains (``kill -9 <pid>``, or ``--kill-rank 2 --kill-epoch 3`` to have one
do it to itself): the others roll back to their last commit, re-form on fresh trees for the
devices that are left, and finish the epochs. The lines that make it elastic are marked
``# blinkflow:``; docs/elastic.md says what happens on a loss, step by step.
"""
import argparse
import os
import signal

import numpy as np
import tensorflow as tf

import keras
from digits import load_digits

import blinkflow.tensorflow.keras as hvd  # blinkflow: Horovod's API, Keras 3 inside

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="learning rate of one rank")
parser.add_argument("--batches-per-commit", type=int, default=1)
parser.add_argument("--kill-rank", type=int, default=-1, help="this rank SIGKILLs itself (a demonstration)")
parser.add_argument("--kill-epoch", type=int, default=3)
args = parser.parse_args()

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

hvd.init()  # blinkflow
first_rank = hvd.rank()

images, labels = load_digits()
images = (images[..., None] / 16.0).astype("float32")

model = keras.Sequential([
    keras.Input((8, 8, 1)),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
# Horovod: scale the learning rate by the number of workers (again after every reset, below).
opt = keras.optimizers.Adam(args.lr * hvd.size())
opt = hvd.DistributedOptimizer(opt)  # blinkflow
model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"])


def on_state_reset():
    """The job re-formed: the learning rate follows the new number of workers."""
    state.model.optimizer.learning_rate.assign(args.lr * hvd.size())  # blinkflow


state = hvd.elastic.KerasState(model, batch=0, epoch=0)  # blinkflow
state.register_reset_callbacks([on_state_reset])  # blinkflow


class KillOneRank(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if first_rank == args.kill_rank and state.epoch == args.kill_epoch:
            os.kill(os.getpid(), signal.SIGKILL)


callbacks = [
    hvd.callbacks.MetricAverageCallback(),  # blinkflow
    hvd.elastic.UpdateEpochStateCallback(state),  # blinkflow
    hvd.elastic.UpdateBatchStateCallback(state),  # blinkflow
    hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),  # blinkflow
    KillOneRank(),
]


@hvd.elastic.run  # blinkflow
def train(state):
    mine = np.arange(len(images)) % hvd.size() == hvd.rank()  # this rank's shard of the job as it is now
    steps = int(mine.sum()) // args.batch_size
    state.model.fit(images[mine], labels[mine], batch_size=args.batch_size, steps_per_epoch=steps,
                    epochs=args.epochs - state.epoch, callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)


train(state)
if hvd.rank() == 0:
    loss, accuracy = model.evaluate(images, labels, verbose=0)
    print(f"done on {hvd.size()} ranks after {hvd.elastic.resets()} reset(s): loss {loss:.4f} accuracy {accuracy:.3f}")
