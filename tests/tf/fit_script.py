"""Run under mpirun (2 or 4 ranks): Keras 3 ``model.fit`` with blinkflow.

- DistributedOptimizer leaves identical weights on every rank, equal to one process training
  SGD on the concatenated batches (compiled and run_eagerly; dense and embedding gradients;
  backward_passes_per_step=2 with average_aggregated_gradients).
- MetricAverageCallback makes ``history['loss']`` identical on all ranks.
- LearningRateWarmupCallback gives the expected rate at each epoch end.
- BroadcastGlobalVariablesCallback makes differently initialised ranks identical after batch 1.
- Saving and loading a model with a DistributedOptimizer; get_config/from_config round trip.

Prints the test harness's completion marker; exits 1 naming every failed check.
"""
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras  # noqa: E402  (after the thread settings, before any op runs)

import blinkflow.tensorflow.keras as hvd  # noqa: E402
from harness import done  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
failures, count = [], 0
BATCH, STEPS = 8, 4


def check(label, ok, detail=""):
    global count
    count += 1
    if not ok:
        failures.append(f"rank {r}: {label} {detail}")


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


def same_on_all_ranks(label, values, atol=0.0):
    values = [np.asarray(v) for v in values]
    everyone = hvd.allgather_object(values)
    ok = all(len(o) == len(values) and all(np.allclose(a, b, atol=atol, rtol=0) for a, b in zip(o, values))
             for o in everyone)
    check(label, ok, "differs between ranks")


def close(label, got, want, atol=1e-5):
    ok = len(got) == len(want) and all(np.allclose(a, b, atol=atol) for a, b in zip(got, want))
    worst = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(got, want))
    check(label, ok, f"max difference {worst}")


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


# 1. Equivalence with single-process SGD on concatenated batches. ``--core`` (the 4-rank launch)
# keeps the variants whose behaviour depends on the number of ranks; the rest run at 2 ranks.
CORE = "--core" in sys.argv
VARIANTS = [("compiled", {}), ("run_eagerly", {"run_eagerly": True}), ("embedding", {"embedding": True}),
            ("embedding sparse_as_dense", {"embedding": True, "sparse_as_dense": True}),
            ("predivide", {"gradient_predivide_factor": 2.0}), ("fp16", {"compression": hvd.Compression.fp16})]
for label, kwargs in VARIANTS[:3] if CORE else VARIANTS:
    got = train_distributed(**kwargs).get_weights()
    want = train_reference(embedding=kwargs.get("embedding", False)).get_weights()
    same_on_all_ranks(f"fit {label}: identical weights", got)
    close(f"fit {label}: equals one process on concatenated batches", got, want,
          atol=5e-3 if "compression" in kwargs else 1e-5)

# Horovod's aggregation: the passes' gradients are summed, and averaged only with
# average_aggregated_gradients; iterations counts every call (2 epochs of STEPS batches).
m = train_distributed(passes=2, average_aggregated_gradients=True)
same_on_all_ranks("backward_passes_per_step=2: identical weights", m.get_weights())
close("backward_passes_per_step=2, averaged: equals one process on 2x batches", m.get_weights(),
      train_reference(passes=2).get_weights())
check("backward_passes_per_step=2: iterations count every batch", int(m.optimizer.iterations.numpy()) == 2 * STEPS,
      m.optimizer.iterations)

# 2. MetricAverageCallback: identical history on every rank (and different without it).
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
check("MetricAverage: the mean of the ranks", np.allclose(histories[True]["loss"], mean_loss, rtol=1e-5))

# 3. LR warmup: rate at the end of epoch e (e+1 epochs done) is lr/size*((e+1)*(size-1)/warmup+1).
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


# 4. Broadcast callback: ranks initialised differently are identical after the first batch.
class FirstBatchWeights(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0 and not hasattr(self, "weights"):
            self.weights = [np.copy(w) for w in self.model.get_weights()]


OPTIMIZERS = [lambda: keras.optimizers.SGD(0.05, momentum=0.9), lambda: keras.optimizers.Adam(0.01)]
for make_optimizer in OPTIMIZERS[1:] if CORE else OPTIMIZERS:
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

# 5. Saving and loading; get_config/from_config.
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
close("load_model: weights", loaded.get_weights(), m.get_weights(), atol=0)
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

if failures:
    print("\n".join(failures), flush=True)
    sys.exit(1)
print(f"fit: {count} checks held", flush=True)
done(r)
