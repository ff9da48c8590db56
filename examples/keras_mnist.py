"""Horovod's canonical Keras recipe, on handwritten digits (8x8 images; data/digits.csv.gz, no download).

    blinkrun -np 2 python examples/keras_mnist.py        # or: mpirun -np 2 python examples/keras_mnist.py

The lines that make it data-parallel are marked ``# blinkflow:``; the rest is plain Keras 3.
"""
import argparse
import math
import os
import tempfile

import numpy as np
import tensorflow as tf

import keras
from digits import load_digits, split

import blinkflow.tensorflow.keras as hvd  # blinkflow: Horovod's API, Keras 3 inside

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--epochs", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.002, help="learning rate of one rank")
parser.add_argument("--num-threads", type=int, default=1, help="TF threads per rank (ranks share the cores)")
parser.add_argument("--checkpoint-dir", default=os.path.join(tempfile.gettempdir(), "blinkflow-keras-mnist"))
args = parser.parse_args()

tf.config.threading.set_intra_op_parallelism_threads(args.num_threads)
tf.config.threading.set_inter_op_parallelism_threads(args.num_threads)

hvd.init()  # blinkflow: start the runtime (one process per device or core)

images, labels = load_digits()
x = (images / 16.0).astype("float32")[..., np.newaxis]
x_train, x_test, y_train, y_test = split(x, labels, test_fraction=0.2)
# blinkflow: each rank trains on its own shard; equal shards, so every rank takes the same number
# of steps (a rank that stepped once more would wait forever for the others' gradients)
shard = len(x_train) // hvd.size()
x_train = x_train[hvd.rank() * shard:(hvd.rank() + 1) * shard]
y_train = y_train[hvd.rank() * shard:(hvd.rank() + 1) * shard]
steps_per_epoch = math.ceil(shard / args.batch_size)
# blinkflow: one repeated tf.data pipeline for the whole fit, as Horovod's examples do. Given
# arrays, Keras builds a new data iterator every epoch, and tearing the old one down (joining
# tf.data's threads) took up to 0.6 s on a busy machine at the first step of an epoch, on one
# rank at a time: every other rank then waited for it in that step's all-reduce.
train = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
         .shuffle(len(x_train), seed=hvd.rank()).batch(args.batch_size).repeat())
validation = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(args.batch_size)

keras.utils.set_random_seed(hvd.rank())  # ranks start differently; the broadcast below aligns them
model = keras.Sequential([
    keras.Input((8, 8, 1)),
    keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Dropout(0.25),
    keras.layers.Flatten(),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dropout(0.5),
    keras.layers.Dense(10, activation="softmax"),
])

scaled_lr = args.lr * hvd.size()  # blinkflow: scale the learning rate by the number of ranks
optimizer = keras.optimizers.Adam(scaled_lr)
optimizer = hvd.DistributedOptimizer(optimizer)  # blinkflow: average gradients over ranks each step
model.compile(loss="sparse_categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])

callbacks = [
    # blinkflow: start every rank from rank 0's weights and optimizer state
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # blinkflow: average the epoch's metrics over ranks (before callbacks that read them)
    hvd.callbacks.MetricAverageCallback(),
    # blinkflow: ramp the scaled learning rate up over the first epochs (Goyal et al.)
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
]
if hvd.rank() == 0:  # blinkflow: checkpoints on rank 0 only, so ranks do not overwrite each other
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")))

# shuffle=False: the pipeline above shuffles; Keras's default (True) only warns for a Dataset
model.fit(train, epochs=args.epochs, callbacks=callbacks, steps_per_epoch=steps_per_epoch,
          validation_data=validation, shuffle=False,
          verbose=1 if hvd.rank() == 0 else 0)  # blinkflow: progress bar on rank 0 only

loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
if hvd.rank() == 0:  # blinkflow: report once
    print(f"Test loss: {loss:.4f}")
    print(f"Test accuracy: {accuracy:.4f}")
