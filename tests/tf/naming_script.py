"""Run under mpirun (2 ranks): unnamed collectives inside ``tf.function`` control flow pair across
ranks although one rank traced more functions first.

TensorFlow names the graphs of loop and cond bodies with a process-wide counter
(``while_body_23``); rank 0 traces unrelated functions with loops and conds first (a logging step
of its own), so its counter is ahead of the others' when the case's function is traced. Unnamed
all-reduces then run in an AutoGraph ``for i in tf.range(...)`` loop, a ``tf.while_loop``, both
branches of a ``tf.cond``, a dataset loop, the gradient of a loop, a nested ``tf.function`` that
rank 0 alone traced on its own first, and an XLA-compiled function (``jit_compile=True``) with a
loop and a cond: every value is right on every rank and nothing stalls (the job's stall shutdown is
short, so a name that differs by rank fails the case with a ShutdownError instead of hanging).
A SyncBatchNormalization layer (unnamed all-reduces in a Keras layer's name scope, which Keras
numbers per process) normalizes with the global batch after rank 0 built one layer more.
An unnamed collective on numpy arrays inside a function being traced, whose name no rank can
derive alike (it runs when a rank traces), is refused on every rank.

Case script of the harness (tests/harness.py), run with other TF case scripts in one launch.
"""
import numpy as np
import tensorflow as tf

from script_checks import check, close  # noqa: I100 (TF's threads set first)

import keras  # noqa: E402

import blinkflow as bf  # noqa: E402
import blinkflow.tensorflow as hvd  # noqa: E402
from harness import run_cases, job_rank_size  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
STEPS = 3


def trace_unrelated_functions_on_rank_0(count=3):
    """Rank 0 traces and runs functions with a loop and a cond that no other rank has: TF's
    process-wide counter, which numbers control-flow bodies, moves ahead on rank 0 alone."""
    if r != 0:
        check("nothing to trace", True)
    for k in range(count if r == 0 else 0):
        @tf.function
        def logging_step(x):
            y = tf.while_loop(lambda i: i < 3, lambda i: i + 1, [x])[0]
            return tf.cond(y > 0, lambda: y, lambda: -y)

        logging_step(tf.constant(k))


def start():
    """Each rank's input ``[rank, 2 * rank + 1]`` and the functions rank 0 traces first."""
    trace_unrelated_functions_on_rank_0()
    return tf.constant([r, 2.0 * r + 1.0])


def inputs(q):
    return np.array([q, 2.0 * q + 1.0])


def averaged_then_counted_up(steps):
    """``x <- mean over ranks of (x + i)`` for i in range(steps): the mean of the inputs plus 0 + 1 + ..."""
    return np.mean([inputs(q) for q in range(n)], axis=0) + sum(range(steps))


def case_unnamed_allreduce_in_a_range_loop_and_a_while_loop(rank, size):
    x = start()

    @tf.function
    def range_loop(x, steps):
        counted = tf.constant(0.0)
        for i in tf.range(steps):
            x = hvd.allreduce(x + tf.cast(i, tf.float32))
            counted += hvd.allreduce(tf.ones([]) + 0.0 * x[0], op=hvd.Sum)
        return x, counted

    @tf.function
    def while_loop(x, steps):
        return tf.while_loop(lambda i, x: i < steps,
                             lambda i, x: (i + 1, hvd.allreduce(x + tf.cast(i, tf.float32))), [0, x])[1]

    got, counted = range_loop(x, tf.constant(STEPS))
    close("AutoGraph range loop", got, averaged_then_counted_up(STEPS))
    close("AutoGraph range loop: a second all-reduce in the body", counted, float(STEPS * n))
    close("tf.while_loop", while_loop(x, tf.constant(STEPS)), averaged_then_counted_up(STEPS))


def case_unnamed_allreduce_in_both_branches_of_a_cond(rank, size):
    x = start()

    @tf.function
    def branch(flag, x):
        return tf.cond(flag, lambda: hvd.allreduce(x, op=hvd.Sum), lambda: hvd.allreduce(2.0 * x, op=hvd.Max))

    close("tf.cond true branch", branch(tf.constant(True), x), sum(inputs(q) for q in range(n)))
    close("tf.cond false branch", branch(tf.constant(False), x), 2.0 * inputs(n - 1))
    close("tf.cond true branch again", branch(tf.constant(True), x), sum(inputs(q) for q in range(n)))


def case_unnamed_allreduce_in_a_dataset_loop(rank, size):
    x = start()

    @tf.function
    def over_dataset(x):
        for v in tf.data.Dataset.range(STEPS):
            x = hvd.allreduce(x + tf.cast(v, tf.float32))
        return x

    close("dataset loop", over_dataset(x), averaged_then_counted_up(STEPS))


def case_gradient_of_a_loop_of_unnamed_allreduces(rank, size):
    start()
    w = tf.Variable([1.0, 2.0])

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            y = w * float(r + 1)
            for _ in tf.range(2):
                y = hvd.allreduce(y, op=hvd.Sum)
            loss = tf.reduce_sum(y)
        return y, tape.gradient(loss, w)

    y, g = gradient()
    total = sum(q + 1.0 for q in range(n))
    close("loop of all-reduces", y, n * total * np.array([1.0, 2.0]))
    # Each all-reduce's gradient is the all-reduce of the output gradient (Horovod's rule): n, n².
    close("its gradient", g, np.full(2, n * n * (r + 1.0)))


def case_a_nested_function_traced_alone_by_one_rank_first(rank, size):
    x = start()

    @tf.function
    def inner(x):
        return hvd.allreduce(x, op=hvd.Sum)

    @tf.function
    def outer(x):
        return tf.cond(x[1] > 0, lambda: inner(x), lambda: x)

    if r == 0:   # a trace of its own, reused by outer on this rank; traced inside outer's cond elsewhere
        inner.get_concrete_function(tf.TensorSpec([2], tf.float32))
    close("nested tf.function in a cond", outer(x), sum(inputs(q) for q in range(n)))


def case_unnamed_allreduce_in_control_flow_under_xla(rank, size):
    from blinkflow.tensorflow.crossing import xla as _xla

    x = start()

    @tf.function(jit_compile=True)
    def compiled(x, steps):
        for i in tf.range(steps):
            x = hvd.allreduce(x + tf.cast(i, tf.float32))
        return tf.cond(x[1] > 0, lambda: hvd.allreduce(x, op=hvd.Sum), lambda: hvd.allreduce(-x, op=hvd.Sum))

    before = _xla.calls_run
    close("XLA: a loop, then a cond", compiled(x, tf.constant(STEPS)), n * averaged_then_counted_up(STEPS))
    check("XLA: the collectives ran through the custom call", _xla.calls_run - before == STEPS + 1,
          f"{_xla.calls_run - before} calls")


def case_sync_batch_norm_after_one_rank_built_one_layer_more(rank, size):
    start()
    if r == 0:
        hvd.SyncBatchNormalization()   # Keras names the next layer sync_batch_normalization_<k + 1> here
    layer = hvd.SyncBatchNormalization()
    names = hvd.allgather_object(layer.name)
    check("the layers' names (and name scopes) differ by rank", len(set(names)) == n, names)
    batches = [np.array([[q, 2.0 * q + 1.0], [q + 1.0, -q]], np.float32) for q in range(n)]

    @tf.function
    def normalize(x):
        return layer(x, training=True)

    got = normalize(tf.constant(batches[r]))
    whole = np.concatenate(batches).astype(np.float64)
    want = (whole - whole.mean(axis=0)) / np.sqrt(whole.var(axis=0) + layer.epsilon)
    # The variance's reduction is the largest: squares summed over the global batch.
    close("normalized with the global batch's statistics", got, want[2 * r:2 * r + 2], np.square(whole).sum(),
          rounding="float32")


def case_an_unnamed_numpy_collective_while_tracing_is_refused_on_every_rank(rank, size):
    start()

    @tf.function
    def traced(x):
        bf.allreduce(np.ones(2))   # would run once, when this rank traces
        return x

    try:
        traced(tf.constant(1.0))
    except bf.NotSupportedError as e:
        check("the error says why and what to do", "while a tf.function was being traced" in str(e)
              and "outside the tf.function" in str(e), str(e))
    else:
        raise AssertionError("an unnamed numpy all-reduce ran while a tf.function was traced")
    # The refused call drew no name on any rank: the next unnamed call pairs.
    close("the next unnamed call", bf.allreduce(np.full(2, float(r)), op=bf.Sum), np.full(2, float(sum(range(n)))))


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
