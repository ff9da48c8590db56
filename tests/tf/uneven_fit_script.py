"""Run under mpirun (2 or 3 ranks): ``model.fit`` on shards with different numbers of batches
(6 and 4 at 2 ranks; 6, 4 and 5 at 3).

The rank that runs out of batches joins until every rank's epoch has ended, so after each epoch
the weights are equal on every rank and equal to a reference computed here from every rank's
data (a step averages the gradients of the ranks that still have a batch, over the job's size);
``history['loss']`` is equal on every rank (MetricAverageCallback runs after the alignment) and
the optimizer counted the longest shard's steps. Once with the usual callbacks, once XLA-compiled
with AlignEpochsCallback alone, once with no blinkflow callback at all.

Case script of the harness (tests/harness.py), run with other TF case scripts in one launch.
"""
import numpy as np

from script_checks import check, close_trained  # (sets TF threads, before keras)

import keras  # noqa: E402

import blinkflow.tensorflow.keras as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
BATCH, EPOCHS, LR = 2, 2, 0.1
BATCHES = [6, 4, 5][:n]


def shard(q):
    rng = np.random.default_rng(7 + q)
    x = rng.normal(size=(BATCHES[q] * BATCH, 3)).astype(np.float32)
    return x, rng.normal(size=(BATCHES[q] * BATCH, 2)).astype(np.float32)


def initial():
    return np.linspace(-0.5, 0.5, 6, dtype=np.float32).reshape(3, 2), np.array([0.1, -0.2], np.float32)


def reference():
    """Weights after each epoch, in float64: step t averages the gradients of the ranks with a
    t-th batch over all n ranks (a rank that has joined contributes zeros)."""
    w, b = (v.astype(np.float64) for v in initial())
    shards = [shard(q) for q in range(n)]
    after = []
    for _ in range(EPOCHS):
        for t in range(max(BATCHES)):
            gw, gb = np.zeros_like(w), np.zeros_like(b)
            for q, (x, y) in enumerate(shards):
                if t < BATCHES[q]:
                    xb, yb = x[t * BATCH:(t + 1) * BATCH].astype(np.float64), y[t * BATCH:(t + 1) * BATCH]
                    err = 2.0 * (xb @ w + b - yb) / yb.size  # d mean((xW + b - y)^2)
                    gw += xb.T @ err
                    gb += err.sum(axis=0)
            w, b = w - LR * gw / n, b - LR * gb / n
        after.append((w.copy(), b.copy()))
    return after


class RecordWeights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.after = []

    def on_epoch_end(self, epoch, logs=None):
        self.after.append([v.numpy().copy() for v in self.model.weights])


def train(label, callbacks, jit_compile):
    w, b = initial()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(
        2, kernel_initializer=keras.initializers.Constant(w), bias_initializer=keras.initializers.Constant(b))])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse", jit_compile=jit_compile)
    record = RecordWeights()
    x, y = shard(r)
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                        callbacks=callbacks + [record])
    want = reference()
    check(f"{label}: an epoch end per epoch", len(record.after) == EPOCHS, str(len(record.after)))
    for epoch, (got, (want_w, want_b)) in enumerate(zip(record.after, want)):
        close_trained(f"{label}: epoch {epoch} kernel and bias = reference", got, [want_w, want_b],
                      steps=(epoch + 1) * max(BATCHES))
        every = hvd.allgather_object([v.tolist() for v in got])
        check(f"{label}: epoch {epoch} weights equal on every rank", all(e == every[0] for e in every))
    iterations = int(model.optimizer.iterations.numpy())
    check(f"{label}: iterations = longest shard's steps", iterations == EPOCHS * max(BATCHES), str(iterations))
    return history


def case_usual_callbacks_align_weights_and_metrics(rank, size):
    history = train("usual callbacks", [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                        hvd.callbacks.MetricAverageCallback()], jit_compile=False)
    losses = hvd.allgather_object(history.history["loss"])
    check("MetricAverageCallback: loss equal on every rank", all(loss == losses[0] for loss in losses), str(losses))


def case_xla_compiled_with_align_epochs_alone(rank, size):
    train("XLA, AlignEpochsCallback", [hvd.callbacks.AlignEpochsCallback()], jit_compile=True)


def case_no_blinkflow_callback_aligns_all_the_same(rank, size):
    """The DistributedOptimizer's fit aligns the epochs itself."""
    train("no blinkflow callback", [], jit_compile=False)


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
