# A Horovod TF2 script, written for blinkflow's tests in the idioms of Horovod's examples and
# documentation: it imports Horovod, and runs only after tests/tf/horovod_port.py's port (the
# import lines, and Keras 3's removal of `experimental_run_tf_function`). It is not run as it is.
import argparse
import os

import tensorflow as tf
import horovod.tensorflow.keras as hvd
from horovod.tensorflow.keras.callbacks import BestModelCheckpoint

parser = argparse.ArgumentParser()
parser.add_argument('--use-adasum', action='store_true', default=False)
parser.add_argument('--steps', type=int, default=6)
args = parser.parse_args()

hvd.init()
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

(images, labels), _ = tf.keras.datasets.mnist.load_data(path='mnist-%d.npz' % hvd.rank())
dataset = tf.data.Dataset.from_tensor_slices(
    (tf.cast(images[..., tf.newaxis] / 255.0, tf.float32), tf.cast(labels, tf.int64)))
dataset = dataset.repeat().shuffle(1000, seed=hvd.rank()).batch(16)


def make_model():
    return tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(4, 3, activation='relu'),
        hvd.SyncBatchNormalization(),
        tf.keras.layers.MaxPooling2D(4),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10, activation='softmax'),
    ])


# A custom training loop: DistributedGradientTape, variables broadcast after the first step.
model = make_model()
loss_fn = tf.losses.SparseCategoricalCrossentropy()
opt = tf.optimizers.SGD(0.01 * hvd.size())
reduce_op = hvd.Adasum if args.use_adasum else hvd.Average


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape, op=reduce_op)
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)
    return loss_value


for batch, (images_batch, labels_batch) in enumerate(dataset.take(args.steps)):
    loss_value = training_step(images_batch, labels_batch, batch == 0)
weights = hvd.allgather_object([w.numpy() for w in model.weights])
assert all((a == b).all() for a, b in zip(weights[0], weights[-1])), 'ranks ended with different weights'
print('loop done on rank %d, loss %.4f' % (hvd.rank(), loss_value))

# model.fit: DistributedOptimizer, Horovod's callbacks, checkpoints written by rank 0.
model = make_model()
opt = hvd.DistributedOptimizer(tf.optimizers.Adam(0.001 * hvd.size()))
model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=['accuracy'],
              experimental_run_tf_function=False)
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.001 * hvd.size(), warmup_epochs=1, verbose=1),
]
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint('./checkpoint-{epoch}.h5'))
best = BestModelCheckpoint(monitor='loss', mode='min')
best.filepath = './best.keras'
callbacks.append(best)
history = model.fit(dataset, steps_per_epoch=args.steps // hvd.size(), callbacks=callbacks, epochs=2,
                    verbose=1 if hvd.rank() == 0 else 0)
print('fit done on rank %d, loss %.4f' % (hvd.rank(), history.history['loss'][-1]))
print('files on rank %d: %s' % (hvd.rank(), sorted(f for f in os.listdir('.') if f.endswith(('.h5', '.keras')))))
