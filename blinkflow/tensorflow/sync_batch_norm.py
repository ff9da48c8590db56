"""``hvd.SyncBatchNormalization``: Keras batch normalization whose batch statistics span every rank.

With small per-GPU batches (detection, segmentation) each rank's own mean and variance are too
noisy; this layer normalizes with the statistics of the whole global batch, as one process
running every rank's examples through ``keras.layers.BatchNormalization`` would.

The statistics are combined from sums, never as a mean of the ranks' means, so ranks with
different batch sizes (the last batch of an epoch) still get the whole batch's result: one
all-reduce (Sum) of each channel's element count and sum gives the global mean, a second of the
squared deviations from that mean gives the global variance, the two passes
``tf.nn.moments`` makes on one batch (a one-pass E[x^2] - E[x]^2 would lose digits when the mean
is large against the spread). A mask (``call(..., mask=)``) weights the elements as Keras does.

The all-reduces are blinkflow's differentiable TF ops, whose gradient is the all-reduce (Sum) of
the output gradients: the gradient of every rank's loss reaches every rank's inputs through the
shared statistics, eagerly, in ``tf.function`` and in ``model.fit``. Out of training (inference,
``trainable=False``) the layer uses its moving statistics and makes no collective call, like
Keras's layer. Every rank of the process set must call the layer in training together.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from ..errors import InvalidArgumentError
from ..ops import ReduceOp
from . import ops, rank_ops


@keras.saving.register_keras_serializable(package="blinkflow")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` with its batch statistics all-reduced over the ranks of
    ``process_set`` (default: every rank). Takes Keras's arguments; ``fused`` is Horovod's and must
    stay False (the statistics are not computed by a fused kernel)."""

    def __init__(self, fused=False, process_set=None, **kwargs):
        if fused in (True, None):
            raise InvalidArgumentError("SyncBatchNormalization does not support fused=True: its statistics are "
                                       "all-reduced between the ops of an unfused batch norm; leave fused=False")
        if kwargs.get("synchronized"):
            raise InvalidArgumentError("synchronized=True is Keras's tf.distribute synchronization; "
                                       "SyncBatchNormalization synchronizes over blinkflow's ranks itself")
        super().__init__(**kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        if rank_ops.size(self.process_set) == 1:
            return super()._moments(inputs, mask)
        axes = self._reduction_axes
        if mask is None:
            weights = None
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), inputs.dtype)
            count = tf.fill(tf.shape(tf.reduce_sum(inputs, axes, keepdims=True)), count)
            total = tf.reduce_sum(inputs, axes, keepdims=True)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(tf.cast(mask, "bool"), -1), tf.shape(inputs)),
                              inputs.dtype)
            count = tf.reduce_sum(weights, axes, keepdims=True)
            total = tf.reduce_sum(inputs * weights, axes, keepdims=True)
        count, total = ops.grouped_allreduce([count, total], op=ReduceOp.SUM, process_set=self.process_set)
        if mask is not None:
            count = count + keras.backend.epsilon()  # Keras's masked moments divide by this
        mean = total / count
        deviations = tf.math.squared_difference(inputs, tf.stop_gradient(mean))
        if weights is not None:
            deviations = deviations * weights
        squares = ops.allreduce(tf.reduce_sum(deviations, axes, keepdims=True), op=ReduceOp.SUM,
                                process_set=self.process_set)
        variance = squares / count
        return tf.squeeze(mean, axes), tf.squeeze(variance, axes)
