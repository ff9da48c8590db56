"""Keras 3 ``model.fit`` with blinkflow:

- DistributedOptimizer leaves identical weights on every rank, equal to one process training
  SGD on the concatenated batches (compiled and run_eagerly; dense and embedding gradients;
  backward_passes_per_step=2 with average_aggregated_gradients).
- MetricAverageCallback makes ``history['loss']`` identical on all ranks.
- LearningRateWarmupCallback gives the expected rate at each epoch end.
- BroadcastGlobalVariablesCallback makes differently initialised ranks identical after batch 1.
- Saving and loading a model with a DistributedOptimizer; get_config/from_config round trip.

Case script of the harness (tests/harness.py), run with other TF case scripts in one launch
(tests/tf/tf_jobs.py runs the variants that do not depend on the number of ranks at 2 ranks only).
"""
import os
import tempfile

import numpy as np
from script_checks import check, close, close_trained, same_on_all_ranks  # (sets TF threads, before keras)

import keras  # noqa: E402

import blinkflow.tensorflow.keras as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
BATCH, STEPS = 8, 4


def data(q, embedding=False):
    rng = np.random.default_rng(100 + q)
    if embedding:
        x = rng.integers(0, 12, size=(BATCH * STEPS, 3))
    else:
        x = rng.normal(size=(BATCH * STEPS, 5)).astype("float32")
    return x, rng.normal(size=(BATCH * STEPS, 1)).astype("float32")


def global_batches(embedding=False, passes=1):
    """What one process sees if every step's batch is the concatenation of all ranks' batches."""
    parts = [data(q, embedding) for q in range(n)]
    xs, ys = [], []
    for step in range(0, STEPS, passes):
        rows = slice(step * BATCH, (step + passes) * BATCH)
        xs += [p[0][rows] for p in parts]
        ys += [p[1][rows] for p in parts]
    return np.concatenate(xs), np.concatenate(ys), BATCH * n * passes


def model(seed, embedding=False):
    keras.utils.set_random_seed(seed)
    if embedding:
        layers = [keras.Input((3,), dtype="int32"), keras.layers.Embedding(12, 4), keras.layers.Flatten(),
                  keras.layers.Dense(1)]
    else:
        layers = [keras.Input((5,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)]
    return keras.Sequential(layers)


def train_distributed(embedding=False, run_eagerly=False, passes=1, epochs=2, **opt_kwargs):
    m = model(7, embedding)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=passes, **opt_kwargs)
    m.compile(optimizer=opt, loss="mse", run_eagerly=run_eagerly)
    x, y = data(r, embedding)
    m.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    return m


_references = {}


def train_reference(embedding=False, passes=1, epochs=2):
    key = (embedding, passes, epochs)
    if key not in _references:
        _references[key] = _train_reference(embedding, passes, epochs)
    return _references[key]


def _train_reference(embedding, passes, epochs):
    m = model(7, embedding)
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, y, batch = global_batches(embedding, passes)
    m.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    return m


def fits_like_one_process(label, steps=2 * STEPS, rounding="float32", **kwargs):
    """Identical weights on every rank, equal to one process training on the concatenated batches."""
    got = train_distributed(**kwargs).get_weights()
    want = train_reference(embedding=kwargs.get("embedding", False)).get_weights()
    same_on_all_ranks(f"fit {label}: identical weights", got)
    close_trained(f"fit {label}: equals one process on concatenated batches", got, want, steps, rounding)


def case_fit_compiled(rank, size):
    fits_like_one_process("compiled")


def case_fit_run_eagerly(rank, size):
    fits_like_one_process("run_eagerly", run_eagerly=True)


def case_fit_embedding(rank, size):
    fits_like_one_process("embedding", embedding=True)


def case_fit_embedding_sparse_as_dense(rank, size):
    fits_like_one_process("embedding sparse_as_dense", embedding=True, sparse_as_dense=True)


def case_fit_predivide(rank, size):
    fits_like_one_process("predivide", gradient_predivide_factor=2.0)


def case_fit_fp16_compression(rank, size):
    fits_like_one_process("fp16", rounding="float16", compression=hvd.Compression.fp16)


def case_aggregated_passes(rank, size):
    """Horovod's aggregation: the passes' gradients are summed, and averaged only with
    average_aggregated_gradients; iterations counts every call (2 epochs of STEPS batches)."""
    m = train_distributed(passes=2, average_aggregated_gradients=True)
    same_on_all_ranks("backward_passes_per_step=2: identical weights", m.get_weights())
    close_trained("backward_passes_per_step=2, averaged: equals one process on 2x batches", m.get_weights(),
                  train_reference(passes=2).get_weights(), STEPS)
    check("backward_passes_per_step=2: iterations count every batch", int(m.optimizer.iterations.numpy()) == 2 * STEPS,
          m.optimizer.iterations)


def case_metric_average(rank, size):
    """Identical history on every rank (and different without it)."""
    histories = {}
    for averaged in (False, True):
        m = model(7)
        m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", metrics=["mae"])
        x, y = data(r)
        callbacks = [hvd.callbacks.MetricAverageCallback()] if averaged else []
        histories[averaged] = m.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                                    callbacks=callbacks).history
    everyone = hvd.allgather_object(histories[True])
    check("MetricAverage: history['loss'] identical", all(h["loss"] == histories[True]["loss"] for h in everyone))
    check("MetricAverage: history['mae'] identical", all(h["mae"] == histories[True]["mae"] for h in everyone))
    unaveraged = hvd.allgather_object(histories[False]["loss"])
    check("without MetricAverage the losses differ (the check can fail)", any(u != unaveraged[0] for u in unaveraged))
    mean_loss = np.mean([u for u in unaveraged], axis=0)
    close("MetricAverage: the mean of the ranks", histories[True]["loss"], mean_loss,
          np.sum(np.abs(unaveraged), axis=0))


def case_learning_rate_warmup_and_schedule(rank, size):
    """The rate at the end of epoch e (e+1 epochs done) is lr/size*((e+1)*(size-1)/warmup+1)."""
    m = model(7)
    m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1 * n)), loss="mse")
    x, y = data(r)
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1 * n, warmup_epochs=3)
    history = m.fit(x, y, batch_size=BATCH, epochs=5, shuffle=False, verbose=0, callbacks=[warmup]).history
    want = [0.1 * n / n * (min(e + 1, 3) * (n - 1) / 3 + 1) for e in range(5)]
    check("warmup: learning rate per epoch", np.allclose(history["learning_rate"], want), f"{history['learning_rate']} vs {want}")
    schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.2, multiplier=lambda e: 0.5 ** e, start_epoch=1)
    history = m.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=[schedule]).history
    check("schedule: staircase rates", np.allclose(history["learning_rate"], [0.1 * n, 0.1, 0.05]), history["learning_rate"])


class FirstBatchWeights(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0 and not hasattr(self, "weights"):
            self.weights = [np.copy(w) for w in self.model.get_weights()]


def broadcast_makes_ranks_identical(make_optimizer):
    """Ranks initialised differently are identical after the first batch."""
    m = model(1000 + r)
    before = m.get_weights()
    m.compile(optimizer=hvd.DistributedOptimizer(make_optimizer()), loss="mse")
    recorder = FirstBatchWeights()
    m.fit(*data(r), batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), recorder])
    name = type(m.optimizer.inner_optimizer).__name__
    firsts = hvd.allgather_object(before[0])
    check(f"broadcast {name}: ranks started different", any(not np.allclose(f, firsts[0]) for f in firsts))
    same_on_all_ranks(f"broadcast {name}: identical after the first batch", recorder.weights)
    same_on_all_ranks(f"broadcast {name}: identical at the end", m.get_weights())
    same_on_all_ranks(f"broadcast {name}: optimizer state identical", [v.numpy() for v in m.optimizer.variables])


def case_broadcast_callback_sgd_momentum(rank, size):
    broadcast_makes_ranks_identical(lambda: keras.optimizers.SGD(0.05, momentum=0.9))


def case_broadcast_callback_adam(rank, size):
    broadcast_makes_ranks_identical(lambda: keras.optimizers.Adam(0.01))


def case_saving_loading_and_config(rank, size):
    m = train_distributed(epochs=1, op=hvd.Sum)
    config = m.optimizer.get_config()
    clone = hvd.DistributedOptimizer.from_config(config)
    check("from_config round trip", clone.get_config() == config, f"{clone.get_config()} vs {config}")
    check("from_config keeps op", clone.op == hvd.Sum)
    path = os.path.join(tempfile.mkdtemp(), f"model-{r}.keras")
    m.save(path)
    loaded = hvd.load_model(path)
    check("load_model: optimizer wrapped", isinstance(loaded.optimizer, hvd.DistributedOptimizer), type(loaded.optimizer))
    check("load_model: op kept", getattr(loaded.optimizer, "op", None) == hvd.Sum)
    for a, b in zip(loaded.get_weights(), m.get_weights()):
        close("load_model: weights", a, b)
    check("load_model: optimizer state", int(loaded.optimizer.iterations.numpy()) == int(m.optimizer.iterations.numpy()),
          f"{loaded.optimizer.iterations.numpy()} vs {m.optimizer.iterations.numpy()}")
    plain = model(7)
    plain.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    plain.fit(*data(r), batch_size=BATCH, epochs=1, verbose=0)
    plain.save(path)
    wrapped = hvd.load_model(path)
    check("load_model wraps a plain optimizer", isinstance(wrapped.optimizer, hvd.DistributedOptimizer))
    wrapped.fit(*data(r), batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same_on_all_ranks("loaded model trains in step", wrapped.get_weights())
    lr = float(keras.ops.convert_to_numpy(wrapped.optimizer.learning_rate))
    check("learning_rate reads the inner optimizer", abs(lr - 0.01) < 1e-7, lr)


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
