"""Run under mpirun (2 or 3 ranks): training whose step XLA compiles, as Keras 3 does on a GPU.

Keras 3 resolves ``jit_compile="auto"`` to True whenever TensorFlow sees a GPU; here XLA is asked
for explicitly on the CPU, so the same compiled steps run. For each way a user trains:

- ``model.fit`` with ``DistributedOptimizer`` and ``model.compile(jit_compile=True)``, also with an
  embedding (its IndexedSlices gradients are reduced dense inside the compiled step);
- a custom loop whose whole step is ``tf.function(jit_compile=True)`` with
  ``DistributedGradientTape`` (gradients in one bucket, and in a bucket each:
  ``BLINKFLOW_BUCKET_BYTES`` is set per launch);
- an eager custom loop whose compute is an XLA-compiled function and whose all-reduce runs
  eagerly between the compiled calls;

the weights are bitwise identical on every rank and equal, within rounding, to the same
training without XLA. Then what XLA cannot express fails alike on every rank: an all-gather (its
rows differ by rank) is refused with NotSupportedError when traced, and a shape that differs by
rank inside a compiled all-reduce fails the step with FailedPreconditionError on every rank.

Case script of the harness (tests/harness.py), run with other TF case scripts in one launch.
"""
import numpy as np
import tensorflow as tf

from script_checks import check, close, close_trained, same_on_all_ranks  # noqa: I100 (TF's threads set first)

import keras  # noqa: E402

import blinkflow.tensorflow as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
BATCH, STEPS = 8, 4


def data(q):
    rng = np.random.default_rng(100 + q)
    return rng.normal(size=(BATCH * STEPS, 5)).astype("float32"), rng.normal(size=(BATCH * STEPS, 1)).astype("float32")


def model():
    keras.utils.set_random_seed(7)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)])


def compiled_calls():
    """How many collectives crossed through an XLA custom call so far (the route was taken)."""
    from blinkflow.tensorflow.crossing import xla as _xla

    return _xla.calls_run


def fit(jit):
    m = model()
    m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=jit)
    m.fit(*data(r), batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    return m


def case_fit_compiled_by_xla(rank, size):
    before = compiled_calls()
    with_xla = fit(True)
    check("fit: the train step ran compiled, collectives through the custom call", compiled_calls() > before,
          f"{compiled_calls() - before} calls")
    check("fit: Keras kept jit_compile", with_xla.jit_compile is True, with_xla.jit_compile)
    same_on_all_ranks("fit jit_compile=True: identical weights", with_xla.get_weights())
    close_trained("fit: XLA equals the same training without XLA", with_xla.get_weights(),
                  fit(False).get_weights(), 2 * STEPS)


def fit_embedding(jit):
    keras.utils.set_random_seed(7)
    m = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(12, 4), keras.layers.Flatten(),
                          keras.layers.Dense(1)])
    m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=jit)
    rng = np.random.default_rng(200 + r)
    m.fit(rng.integers(0, 12, size=(BATCH * STEPS, 3)), rng.normal(size=(BATCH * STEPS, 1)).astype("float32"),
          batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return m


def case_fit_with_an_embedding_compiled_by_xla(rank, size):
    """Embedding gradients (IndexedSlices) are reduced dense inside the compiled step."""
    embedded = fit_embedding(True)
    same_on_all_ranks("fit with an embedding, jit_compile=True: identical weights", embedded.get_weights())
    close_trained("fit with an embedding: XLA equals the same training without XLA", embedded.get_weights(),
                  fit_embedding(False).get_weights(), STEPS)


def custom_loop(jit):
    m = model()
    opt = keras.optimizers.SGD(0.1)
    x, y = data(r)

    @tf.function(jit_compile=jit)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m(xb, training=True) - yb))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
        return hvd.allreduce(loss, name="xla.loss")

    losses = [float(step(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])) for i in range(STEPS)]
    return m, losses


def case_custom_loop_whose_whole_step_is_compiled(rank, size):
    before = compiled_calls()
    (loop_xla, losses_xla), (loop_plain, losses_plain) = custom_loop(True), custom_loop(False)
    check("tf.function(jit_compile=True): collectives through the custom call", compiled_calls() > before)
    same_on_all_ranks("tf.function(jit_compile=True): identical weights", loop_xla.get_weights())
    close_trained("tf.function(jit_compile=True): equals the same loop without XLA", loop_xla.get_weights(),
                  loop_plain.get_weights(), STEPS)
    close_trained("tf.function(jit_compile=True): the averaged losses", [losses_xla], [losses_plain], STEPS)


def eager_loop(jit):
    m = model()
    opt = keras.optimizers.SGD(0.1)
    x, y = data(r)

    @tf.function(jit_compile=jit)
    def gradients(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m(xb, training=True) - yb))
        return tape.gradient(loss, m.trainable_variables)

    for i in range(STEPS):
        grads = gradients(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])
        opt.apply_gradients(zip(hvd.grouped_allreduce(grads), m.trainable_variables))
    return m


def case_eager_loop_around_compiled_gradients(rank, size):
    """The all-reduce runs eagerly between the compiled calls."""
    eager_xla = eager_loop(True)
    same_on_all_ranks("eager loop, compiled gradients: identical weights", eager_xla.get_weights())
    close_trained("eager loop, compiled gradients: equals uncompiled", eager_xla.get_weights(),
              eager_loop(False).get_weights(), STEPS)


@tf.function(jit_compile=True)
def gather(x):
    return hvd.allgather(x, name="xla.gather")


@tf.function(jit_compile=True)
def mismatched(x):
    return hvd.allreduce(x, name="xla.mismatch")


def case_what_xla_cannot_express_fails_alike_on_every_rank(rank, size):
    """And the job goes on."""
    try:
        gather(tf.ones([r + 1, 2]))
        raised = None
    except Exception as error:  # noqa: BLE001 - the type is what is checked
        raised = error
    check("allgather inside XLA is refused with NotSupportedError", isinstance(raised, hvd.NotSupportedError),
          f"{type(raised).__name__}: {str(raised)[:300]}")
    check("allgather inside XLA: the error says how to fix it", "jit_compile=False" in str(raised), str(raised))
    try:
        mismatched(tf.ones([2 + (r == 0)]))
        raised = None
    except Exception as error:  # noqa: BLE001 - the type is what is checked
        raised = error
    check("a shape that differs by rank fails the compiled step", isinstance(raised, tf.errors.FailedPreconditionError),
          f"{type(raised).__name__}: {str(raised)[:300]}")
    check("mismatch inside XLA: the message names the tensor", "xla.mismatch" in str(raised), str(raised)[:300])
    after = hvd.allreduce(tf.constant([float(r)]), op=hvd.Sum, name="xla.after")
    close("the runtime is usable after a failed compiled step", after, [sum(range(n))])


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
