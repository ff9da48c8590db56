"""Horovod's layers and Keras pieces on blinkflow, under mpirun (``test_layers.py``: 1, 2, 3 ranks).
Case script of the harness (tests/harness.py), run with other TF case scripts in one launch
(tests/tf/tf_jobs.py).

- ``SyncBatchNormalization`` equals ``keras.layers.BatchNormalization`` run on the whole global
  batch: outputs, moving statistics and gradients, eagerly, in ``tf.function`` and in
  ``model.fit``, with the same and with different batch sizes per rank.
- ``hvd.Adasum`` as ``op=`` of a TF all-reduce (and its gradient), of ``DistributedGradientTape``
  and of ``DistributedOptimizer``, against a numpy reference of Horovod's algorithm.
- ``BestModelCheckpoint`` writes on rank 0 only, and only when the monitored value improved.

Every rank computes every rank's input, so each checks the whole result.
"""
import os
import tempfile

import numpy as np
import tensorflow as tf

import script_checks  # noqa: F401, I100 (TF's threads set first)

import keras  # noqa: E402

import blinkflow.tensorflow.keras as hvd  # noqa: E402
from harness import close, skip  # noqa: E402

hvd.init()

CHANNELS = 3


def rows_of(q, uneven):
    """Rank q's batch size: 4 each, or 2, 5, 3, ... (a different size on every rank)."""
    return (2, 5, 3, 6)[q % 4] if uneven else 4


def global_batch(n, uneven, seed=0):
    """(whole batch, [start, stop) of each rank): images of CHANNELS channels, far from zero mean."""
    sizes = [rows_of(q, uneven) for q in range(n)]
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(sum(sizes), 4, 4, CHANNELS)) * [1.0, 3.0, 0.5] + [5.0, -2.0, 0.0]).astype("float32")
    starts = np.cumsum([0] + sizes)
    return x, [(int(starts[q]), int(starts[q + 1])) for q in range(n)]


def twin_layers(axis=-1):
    """(SyncBatchNormalization, BatchNormalization) built alike, with the same non-trivial weights."""
    sync = hvd.SyncBatchNormalization(axis=axis, momentum=0.9)
    plain = keras.layers.BatchNormalization(axis=axis, momentum=0.9)
    shape = (None, 4, 4, CHANNELS) if axis == -1 else (None, CHANNELS, 4, 4)
    for layer in (sync, plain):
        layer.build(shape)
        layer.gamma.assign([1.5, 0.5, 2.0])
        layer.beta.assign([0.1, -0.2, 0.3])
    return sync, plain


def loss_of(y):
    """A loss whose gradient differs element by element (a plain sum's would vanish through BN)."""
    weights = tf.reshape(tf.range(tf.size(y[0]), dtype=y.dtype) / 10.0, tf.shape(y[0]))
    return tf.reduce_sum(tf.square(y) * weights)


def forward_and_grads(layer, x, in_function):
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = loss_of(y)
        dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
        return y, dx, dgamma, dbeta

    run = tf.function(step) if in_function else step
    return [np.asarray(t) for t in run(tf.constant(x))]


def check_sync_against_whole_batch(r, n, uneven, in_function, axis=-1):
    x, spans = global_batch(n, uneven, seed=n)
    if axis == 1:
        x = np.ascontiguousarray(np.moveaxis(x, -1, 1))
    lo, hi = spans[r]
    sync, plain = twin_layers(axis)
    y, dx, dgamma, dbeta = forward_and_grads(sync, x[lo:hi], in_function)
    want_y, want_dx, want_dgamma, want_dbeta = forward_and_grads(plain, x, in_function)
    size = x.shape[0] * 16
    bound = np.abs(want_y) + 10.0
    close(y, want_y[lo:hi], bound[lo:hi], ranks=size, what="output")
    close(dx, want_dx[lo:hi], np.abs(want_dx[lo:hi]) + np.abs(want_dx).max(), ranks=size, what="input gradient")
    # gamma and beta are this rank's variables: their gradients add up over the ranks to the whole batch's
    for got, want, what in ((dgamma, want_dgamma, "gamma"), (dbeta, want_dbeta, "beta")):
        total = hvd.allreduce(tf.constant(got), op=hvd.Sum, name=f"sum.{what}.{uneven}.{in_function}.{axis}")
        close(np.asarray(total), want, np.abs(want) * 0 + np.abs(want).max() + 1.0, ranks=size, what=what)
    for got, want, what in ((sync.moving_mean, plain.moving_mean, "moving mean"),
                            (sync.moving_variance, plain.moving_variance, "moving variance")):
        close(np.asarray(got), np.asarray(want), np.abs(np.asarray(want)) + 1.0, ranks=size, what=what)


def case_sync_batch_norm_eager_even(r, n):
    check_sync_against_whole_batch(r, n, uneven=False, in_function=False)


def case_sync_batch_norm_eager_uneven(r, n):
    check_sync_against_whole_batch(r, n, uneven=True, in_function=False)


def case_sync_batch_norm_tf_function_uneven(r, n):
    check_sync_against_whole_batch(r, n, uneven=True, in_function=True)


def case_sync_batch_norm_channels_first(r, n):
    check_sync_against_whole_batch(r, n, uneven=True, in_function=True, axis=1)


def case_sync_batch_norm_inference_makes_no_collective(r, n):
    """Out of training the moving statistics normalize, on one rank alone (no peer is waiting)."""
    sync, plain = twin_layers()
    x, _ = global_batch(1, False, seed=3)
    if r == 0:
        close(np.asarray(sync(x, training=False)), np.asarray(plain(x, training=False)), np.abs(x) + 1.0)
    hvd.barrier()


def fit_model(layer_class, seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4, 4, CHANNELS))
    h = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    h = layer_class(momentum=0.5)(h)
    h = keras.layers.Flatten()(h)
    outputs = keras.layers.Dense(1)(h)
    return keras.Model(inputs, outputs)


def case_sync_batch_norm_in_model_fit(r, n):
    """One process fitting the whole batch, and n ranks fitting their quarters with
    SyncBatchNormalization and DistributedOptimizer, end with the same weights (equal batches:
    the averaged gradient of the ranks' mean losses is the whole batch's)."""
    x, spans = global_batch(n, False, seed=11)
    y = np.random.default_rng(12).normal(size=(x.shape[0], 1)).astype("float32")
    lo, hi = spans[r]
    whole = fit_model(keras.layers.BatchNormalization, seed=5)
    whole.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    whole.fit(x, y, batch_size=x.shape[0], epochs=3, shuffle=False, verbose=0)
    ours = fit_model(hvd.SyncBatchNormalization, seed=5)
    ours.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    ours.fit(x[lo:hi], y[lo:hi], batch_size=hi - lo, epochs=3, shuffle=False, verbose=0)
    for got, want in zip(ours.weights, whole.weights):
        want = np.asarray(want)
        close(np.asarray(got), want, np.abs(want) + 1.0, ranks=x.shape[0] * 16, what=got.path)


def case_sync_batch_norm_refuses_fused(r, n):
    try:
        hvd.SyncBatchNormalization(fused=True)
    except hvd.InvalidArgumentError as e:
        assert "fused" in str(e), str(e)
    else:
        raise AssertionError("fused=True was accepted")


def case_sync_batch_norm_serializes(r, n):
    layer = hvd.SyncBatchNormalization(momentum=0.7, name="norm")
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(again) is hvd.SyncBatchNormalization and again.momentum == 0.7 and again.name == "norm"


# ------------------------------------------------------------------------------------- Adasum
def power_of_two(n):
    return n & (n - 1) == 0


def needs_power_of_two(n):
    if not power_of_two(n):
        skip(f"Adasum runs on a power-of-two number of ranks; {n} is refused (case adasum_refused_in_tf)")


def adasum_reference(per_rank):
    """Horovod's Adasum of one tensor per rank: pairs over the tree of ranks, in float64."""
    level = [np.asarray(t, np.float64).ravel() for t in per_rank]
    while len(level) > 1:
        pairs = []
        for a, b in zip(level[0::2], level[1::2]):
            dot = a @ b
            acoeff = 1 - dot / (2 * (a @ a)) if a @ a > 0 else 1.0
            bcoeff = 1 - dot / (2 * (b @ b)) if b @ b > 0 else 1.0
            pairs.append(acoeff * a + bcoeff * b)
        level = pairs
    return level[0].reshape(np.shape(per_rank[0]))


def adasum_close(got, per_rank, what):
    want = adasum_reference(per_rank)
    close(np.asarray(got), want, 4 * sum(np.abs(np.asarray(t, np.float64)) for t in per_rank), ranks=len(per_rank),
          rounding=np.asarray(got).dtype, what=what)


def signed(q, shape, salt):
    return np.random.default_rng(salt * 100 + q).normal(size=shape).astype("float32")


def case_adasum_allreduce_and_its_gradient(r, n):
    """Forward: Adasum of the ranks' tensors. Backward (Horovod's rule): Adasum of the ranks'
    output gradients. Eagerly and in tf.function."""
    needs_power_of_two(n)
    xs = [signed(q, (6,), 1) for q in range(n)]
    ws = [signed(q, (6,), 2) for q in range(n)]

    def step(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = hvd.allreduce(x, op=hvd.Adasum)
            loss = tf.reduce_sum(y * w)
        return y, tape.gradient(loss, x)

    for label, run in (("eager", step), ("tf.function", tf.function(step))):
        y, dx = run(tf.constant(xs[r]), tf.constant(ws[r]))
        adasum_close(y, xs, f"{label} forward")
        adasum_close(dx, ws, f"{label} gradient")


def case_adasum_gradient_tape(r, n):
    needs_power_of_two(n)
    v = tf.Variable(np.arange(4, dtype="float32"))
    m = tf.Variable(np.ones((2, 2), "float32"))
    xs = [signed(q, (4,), 3) for q in range(n)]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * xs[r]) + tf.reduce_sum(m * xs[r][:2] * xs[r][2:])
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    gv, gm = tape.gradient(loss, [v, m])
    adasum_close(gv, xs, "vector gradient")
    adasum_close(gm, [np.broadcast_to(x[:2] * x[2:], (2, 2)) for x in xs], "matrix gradient")


def case_adasum_distributed_optimizer_in_fit(r, n):
    """One SGD step of model.fit with DistributedOptimizer(op=Adasum) moves every weight by
    -lr times the Adasum of the ranks' own gradients."""
    needs_power_of_two(n)
    keras.utils.set_random_seed(21)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    start = [np.asarray(w) for w in model.weights]
    x = signed(r, (5, 3), 4)
    y = signed(r, (5, 2), 5)
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y, model(x))
    mine = [np.asarray(g) for g in tape.gradient(loss, model.trainable_weights)]
    everyone = hvd.allgather_object(mine)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum), loss="mse")
    model.fit(x, y, batch_size=5, epochs=1, shuffle=False, verbose=0)
    for i, (w, w0) in enumerate(zip(model.trainable_weights, start)):
        step = (w0 - np.asarray(w)) / 0.1
        adasum_close(step, [grads[i] for grads in everyone], f"weight {i}")


def case_adasum_refused_in_tf(r, n):
    if power_of_two(n):
        skip(f"{n} ranks is a power of two: Adasum runs (the other Adasum cases)")
    for label, run in (("eager", lambda t: hvd.allreduce(t, op=hvd.Adasum, name="odd.eager")),
                       ("tf.function", tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum, name="odd.fn")))):
        try:
            run(tf.ones(3))
        except (hvd.InvalidArgumentError, tf.errors.InvalidArgumentError) as e:
            assert "power-of-two" in str(e), (label, str(e))
        else:
            raise AssertionError(f"{label}: Adasum over {n} ranks was not refused")


# ---------------------------------------------------------------------------- BestModelCheckpoint
class Score(keras.callbacks.Callback):
    """Puts a chosen value under ``logs["score"]`` at each epoch's end (before the checkpoint)."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def on_epoch_end(self, epoch, logs=None):
        logs["score"] = self.values[epoch]


def tiny_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    return model


def fit_with_checkpoint(checkpoint, values):
    x = np.ones((4, 2), "float32")
    tiny_model().fit(x, x[:, :1], epochs=len(values), verbose=0, callbacks=[Score(values), checkpoint])


def case_best_model_checkpoint_saves_improvements_on_rank_zero(r, n):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "best-{epoch}.keras")
        fit_with_checkpoint(hvd.callbacks.BestModelCheckpoint(monitor="score", mode="min", filepath=path),
                            [3.0, 1.0, 2.0, 0.5])
        saved = sorted(os.listdir(folder))
        want = ["best-1.keras", "best-2.keras", "best-4.keras"] if r == 0 else []
        assert saved == want, (saved, want)
        if r == 0:
            keras.models.load_model(os.path.join(folder, "best-4.keras"), compile=False)


def case_best_model_checkpoint_path_set_later(r, n):
    """Horovod's pattern: no path at construction, ``callback.filepath`` set before fit; weights only."""
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = hvd.callbacks.BestModelCheckpoint(monitor="score", mode="min", save_weights_only=True)
        assert checkpoint.save_best_only and checkpoint.filepath is None
        try:
            fit_with_checkpoint(checkpoint, [1.0])
        except hvd.InvalidArgumentError as e:
            assert "filepath" in str(e), str(e)
        else:
            raise AssertionError("fit started with no checkpoint path")
        checkpoint.filepath = os.path.join(folder, "w.weights.h5")
        fit_with_checkpoint(checkpoint, [2.0, 1.0])
        assert sorted(os.listdir(folder)) == (["w.weights.h5"] if r == 0 else [])
