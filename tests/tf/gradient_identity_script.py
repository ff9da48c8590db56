"""Run under mpirun (2 or 3 ranks): a gradient is reduced with the same variable's gradient on
every rank, whatever differs between the ranks' steps.

- ``None`` gradients that differ by rank (even ranks use variable ``a``, odd ranks ``b``): every
  rank gets, for each variable, the sum of the ranks that had a gradient over the set's size (a
  rank without one contributes zeros), eagerly and in a ``tf.function``, through
  DistributedGradientTape and through DistributedOptimizer.apply.
- A gradient sparse (``IndexedSlices``) on one rank and dense or ``None`` on another: a
  TensorMismatchError naming the variable on every rank, the next step works; with
  ``sparse_as_dense=True`` the result is right.
- ``backward_passes_per_step=2`` with a gradient present in the first pass and ``None`` in the
  second: the first pass's gradient is applied.

Run with BLINKFLOW_BUCKET_BYTES=0 (one bucket: the mis-pairing case) or 1 (a bucket per
gradient). Case script of the harness (tests/harness.py), run with other TF case scripts in one
launch.
"""
import numpy as np
import tensorflow as tf

from script_checks import MODES, check, close, run  # noqa: I100 (TF's threads set first)

import keras  # noqa: E402

import blinkflow.tensorflow as hvd  # noqa: E402
from blinkflow.errors import TensorMismatchError  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
USES_A = r % 2 == 0


def weight(value):
    return np.full(3, value, np.float32)


def expected(uses):
    """The averaged gradient of a variable whose gradient rank q has (``(q + 1) * ones``) when ``uses(q)``."""
    return weight(sum(q + 1 for q in range(n) if uses(q)) / n)


WANT_A, WANT_B = expected(lambda q: q % 2 == 0), expected(lambda q: q % 2 == 1)
#: The summed magnitudes of every rank's gradient ((q + 1) * ones): what an average's rounding scales with.
MAGNITUDE = sum(q + 1.0 for q in range(n))


def loss_of(a, b):
    return float(r + 1) * tf.reduce_sum(a if USES_A else b)


a, b = tf.Variable(weight(0.0), name="head_a"), tf.Variable(weight(0.0), name="head_b")


def tape_step():
    with tf.GradientTape() as tape:
        loss = loss_of(a, b)
    return hvd.DistributedGradientTape(tape).gradient(loss, [a, b])


def case_distributed_gradient_tape(rank, size):
    for mode in MODES:
        for attempt in range(2):
            ga, gb = run(tape_step, mode)
            check(f"tape {mode} {attempt}: gradients exist", ga is not None and gb is not None, f"{ga} {gb}")
            close(f"tape {mode} {attempt}: d/da", ga, WANT_A, MAGNITUDE)
            close(f"tape {mode} {attempt}: d/db", gb, WANT_B, MAGNITUDE)


def optimizer_run(mode, passes=1, second_pass_has_a=True):
    va, vb = keras.Variable(weight(0.0), name="opt_a"), keras.Variable(weight(0.0), name="opt_b")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=passes)
    opt.build([va, vb])

    def one_pass(use_a):
        def step():
            with tf.GradientTape() as tape:
                loss = float(r + 1) * tf.reduce_sum(va if use_a else vb)
            opt.apply(tape.gradient(loss, [va, vb]), [va, vb])
        return step

    if passes == 1:
        run(one_pass(USES_A), mode)
    else:
        run(one_pass(True), mode)
        run(one_pass(USES_A if second_pass_has_a else False), mode)
    return va.numpy(), vb.numpy()


def case_distributed_optimizer_apply_and_accumulation(rank, size):
    for mode in MODES:
        va, vb = optimizer_run(mode)
        close(f"optimizer {mode}: a", va, -WANT_A, MAGNITUDE)
        close(f"optimizer {mode}: b", vb, -WANT_B, MAGNITUDE)
        # Pass 1: every rank has d/da = (q + 1); pass 2: only rank-parity's variable. The sum of the
        # two passes is all-reduced; a is never None in pass 1, b only where pass 2 has it.
        va, vb = optimizer_run(mode, passes=2)
        close(f"accumulation {mode}: a keeps pass 1", va,
              -(weight(sum(q + 1 for q in range(n)) / n) + WANT_A), 2 * MAGNITUDE)
        close(f"accumulation {mode}: b", vb, -WANT_B, MAGNITUDE)
        va, vb = optimizer_run(mode, passes=2, second_pass_has_a=False)
        close(f"accumulation {mode}: a present only in pass 1", va, -weight(sum(q + 1 for q in range(n)) / n), MAGNITUDE)


table = tf.Variable(np.zeros((4, 2), np.float32), name="lookup_table")


def mixed_step(other, sparse_as_dense=False):
    def step():
        with tf.GradientTape() as tape:
            if r == 0:
                loss = tf.reduce_sum(tf.gather(table, [1, 2]))  # IndexedSlices
            elif other == "dense":
                loss = tf.reduce_sum(tf.matmul(tf.ones((1, 4)), table))
            else:
                loss = tf.reduce_sum(a)  # no gradient for the table
        return hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(loss, [table])[0]
    return step


def case_sparse_on_one_rank_dense_or_none_on_another(rank, size):
    """An error naming the variable, on every rank; with sparse_as_dense the right result."""
    for mode in MODES:
        for other in ("dense", "none"):
            try:
                run(mixed_step(other), mode)
                raised = None
            except Exception as error:  # noqa: BLE001 - the type is what is checked
                raised = error
            # Eagerly the blinkflow error; inside a tf.function its tf.errors class.
            wanted = TensorMismatchError if mode == "eager" else tf.errors.FailedPreconditionError
            check(f"sparse/{other} {mode}: TensorMismatchError naming the variable",
                  isinstance(raised, wanted) and "lookup_table" in str(raised) and "sparse on 1 of" in str(raised),
                  f"{type(raised).__name__}: {str(raised)[:300]}")
            got = run(mixed_step(other, sparse_as_dense=True), mode)
            rows = np.zeros((4, 2), np.float32)
            rows[1:3] += 1.0  # rank 0's lookup
            if other == "dense":
                rows += n - 1  # every other rank's dense gradient is ones
            close(f"sparse/{other} {mode}: sparse_as_dense result", tf.convert_to_tensor(got), rows / n, float(n))


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
