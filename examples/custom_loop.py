"""A custom TF2 training loop with DistributedGradientTape (Horovod's tensorflow2 recipe), on
handwritten digits (data/digits.csv.gz).

    blinkrun -np 2 python examples/custom_loop.py        # or: mpirun -np 2 python examples/custom_loop.py
"""
import argparse

import numpy as np
import tensorflow as tf

import keras
from digits import load_digits, split

import blinkflow.tensorflow as hvd  # blinkflow: Horovod's TF2 API

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--num-threads", type=int, default=1, help="TF threads per rank")
args = parser.parse_args()
tf.config.threading.set_intra_op_parallelism_threads(args.num_threads)
tf.config.threading.set_inter_op_parallelism_threads(args.num_threads)

hvd.init()  # blinkflow: start the runtime

images, labels = load_digits()
x_train, x_test, y_train, y_test = split((images.reshape(-1, 64) / 16.0).astype("float32"), labels, test_fraction=0.2)
dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
           .shard(hvd.size(), hvd.rank())  # blinkflow: each rank reads its own shard
           .repeat().shuffle(512, seed=hvd.rank()).batch(args.batch_size))

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.SGD(0.05 * hvd.size(), momentum=0.9)  # blinkflow: scale the learning rate


@tf.function
def train_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)  # blinkflow: gradients averaged over ranks, one fused call
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    # blinkflow: after the first step (when the optimizer's slots exist) every rank takes rank 0's state
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables, root_rank=0)
    return loss


for step, (images, labels) in enumerate(dataset.take(args.steps)):
    loss = train_step(images, labels, step == 0)
    if step % 50 == 0 and hvd.rank() == 0:  # blinkflow: log on rank 0 only
        print(f"step {step}: loss {float(loss):.4f}")

logits = model(x_test, training=False)
accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
accuracy = float(hvd.allreduce(np.array([accuracy]), name="test_accuracy")[0])  # blinkflow: same on all ranks
if hvd.rank() == 0:
    print(f"Test accuracy: {accuracy:.4f}")
