"""Gradients in buckets, with one TensorFlow inter-op thread.

- Inside a tf.function, the last layer's bucket is submitted before the first layer's backprop
  runs (overlap), seen by a probe in that backprop; the gradients are the average over ranks.
- Submissions in a different order on every rank (matching is by name) complete; none blocks.
- A step with two tapes, sparse and dense gradients, fp16 and a blocking collective between
  them finishes on every rank (no cross-rank deadlock with one thread), eagerly and traced.
- Errors: a cross-rank mismatch raises at the wait (FailedPreconditionError in a graph) on every
  rank, and the next step works; a submission that fails locally raises at the wait, after
  the other buckets were synchronized.
- The sparse agreement (a blocking collective) runs after backprop has begun, at the same point
  of the step on every rank, also when the last variable's gradient is None on this rank.
- On the device route (the fake CuPy), no tensor crosses through the host.

Run with BLINKFLOW_BUCKET_BYTES small, so every gradient is a bucket of its own. Case script of
the harness (tests/harness.py), run with other TF case scripts in one launch.
"""
import numpy as np
import tensorflow as tf

from script_checks import MODES, Route, check, close, run  # noqa: I100 (TF's threads set first)

import blinkflow as bf  # noqa: E402
import blinkflow.tensorflow as hvd  # noqa: E402
from blinkflow.tensorflow import gradients  # noqa: E402
from blinkflow.tensorflow.crossing import arrays as crossing_arrays  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
ROUTE = Route()


def submitted_so_far():
    return sum(crossing_arrays.conversions.values())


# Overlap: a probe in the backprop of the first layer records how many tensors had been
# handed to the runtime when it ran.
probe_saw = []


@tf.custom_gradient
def probe(x):
    def grad(dy):
        def record(dy_array):
            probe_saw.append(submitted_so_far())
            return dy_array
        return tf.numpy_function(record, [dy], dy.dtype, stateful=False)
    return tf.identity(x), grad


weights = [tf.Variable(np.full((3, 3), 0.1 * (i + 1) + 0.01 * r, np.float32)) for i in range(4)]
x_in = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 6.0 + r)


def forward():
    y = probe(tf.tanh(tf.matmul(x_in, weights[0])))
    for w in weights[1:]:
        y = tf.tanh(tf.matmul(y, w))
    return tf.reduce_sum(y)


@tf.function
def overlap_step():
    with tf.GradientTape() as tape:
        loss = forward()
    return hvd.DistributedGradientTape(tape).gradient(loss, weights)


def case_later_buckets_are_submitted_before_the_first_layers_backprop(rank, size):
    """A probe in the backprop of the first layer records how many tensors had been handed to the
    runtime when it ran: with buckets, the last layers' gradients are already out."""
    for _ in range(2):
        before = submitted_so_far()
        probe_saw.clear()
        grads = overlap_step()
        check("overlap: the probe ran once", len(probe_saw) == 1, probe_saw)
        check("overlap: later layers' buckets were submitted before the first layer's backprop",
              probe_saw and probe_saw[0] - before >= 2, f"{[p - before for p in probe_saw]} tensors out")
    with tf.GradientTape() as tape:
        local_loss = forward()
    local = [g.numpy() for g in tape.gradient(local_loss, weights)]
    everyone = hvd.allgather_object(local)
    for i, g in enumerate(grads):
        close(f"overlap: gradient {i} is the mean over ranks", g, np.mean([e[i] for e in everyone], axis=0),
              np.sum([np.abs(e[i]) for e in everyone], axis=0))


def case_submissions_in_any_order_match_by_name(rank, size):
    """Every rank submits in its own order, then waits once."""
    parts = [tf.constant(np.full(k + 1, float(r + k), np.float32)) for k in range(5)]
    for mode in MODES:
        def shuffled_submits(mode=mode):
            order = list(range(5)) if r % 2 == 0 else list(reversed(range(5)))
            if r == 2:
                order = [2, 0, 4, 1, 3]
            pendings = {k: gradients.submit_grouped_allreduce([parts[k]], bf.Sum, f"order.{mode}.{k}") for k in order}
            results = gradients.wait([pendings[k] for k in range(5)], f"order.{mode}.wait")
            return [res[0] for res in results]
        for k, got in enumerate(run(shuffled_submits, mode)):
            close(f"{mode} any submission order: bucket {k}", got, np.full(k + 1, sum(q + k for q in range(n))))


emb = tf.Variable(np.zeros((6, 2), np.float32))
dense = tf.Variable(np.ones((2, 2), np.float32))
other = tf.Variable(np.ones((3,), np.float32))


def two_tapes():
    with tf.GradientTape(persistent=True) as tape:
        loss1 = tf.reduce_sum(tf.gather(emb, [r % 6, 5]) @ dense) * float(r + 1)
        loss2 = tf.reduce_sum(other * other) * float(r + 1)
    g1 = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16,
                                     name="first").gradient(loss1, [emb, dense])
    total = hvd.allreduce(tf.reshape(loss1 + loss2, [1]), op=bf.Sum, name="between")  # blocks until all arrive
    g2 = hvd.DistributedGradientTape(tape, op=bf.Sum, name="second").gradient(loss2, [other])
    return tf.convert_to_tensor(g1[0]), g1[1], g2[0], total, isinstance(g1[0], tf.IndexedSlices)


def case_two_tapes_sparse_dense_fp16_and_a_blocking_collective_never_deadlock(rank, size):
    for mode in MODES:
        for step in range(3):
            g_emb, g_dense, g_other, total, sparse = run(two_tapes, mode)
        check(f"{mode} two tapes: embedding gradient stays IndexedSlices", bool(sparse))
        want_emb = np.zeros((6, 2))
        for q in range(n):
            want_emb[q % 6] += (q + 1) * 2.0 / n
            want_emb[5] += (q + 1) * 2.0 / n
        close(f"{mode} two tapes: sparse mean", g_emb, want_emb, n * want_emb, rounding="float16")
        close(f"{mode} two tapes: dense fp16 mean", g_dense, np.zeros((2, 2)))
        close(f"{mode} two tapes: Sum", g_other, np.full(3, 2.0 * sum(q + 1 for q in range(n))))
        check(f"{mode} two tapes: the blocking collective ran", np.isfinite(total.numpy()).all(), total)


MEAN_FACTOR = sum(q + 1 for q in range(n)) / n


def case_errors_raise_at_the_wait_and_the_next_step_works(rank, size):
    """A cross-rank mismatch in a bucket raises at the wait on every rank; the next step works.
    A submission rejected locally (Average of bool) raises at the wait, after the good one."""
    for mode in MODES:
        bad = tf.Variable(np.ones(r + 1, np.float32))
        good = tf.Variable(np.ones(2, np.float32))

        def mismatched():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(bad) + tf.reduce_sum(good)
            return hvd.DistributedGradientTape(tape, name=f"mismatch.{mode}").gradient(loss, [bad, good])
        try:
            run(mismatched, mode)
            raised = None
        except Exception as error:  # noqa: BLE001 - the type is what is checked
            raised = error
        expected = bf.TensorMismatchError if mode == "eager" else tf.errors.FailedPreconditionError
        check(f"{mode} mismatch raises {expected.__name__}", isinstance(raised, expected),
              f"{type(raised).__name__}: {str(raised)[:300]}")
        check(f"{mode} mismatch names the bucket", f"mismatch.{mode}.bucket" in str(raised), str(raised)[:300])
        fixed = tf.Variable(np.ones(2, np.float32))

        def matched():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(fixed) * float(r + 1) + tf.reduce_sum(good)
            return hvd.DistributedGradientTape(tape, name=f"mismatch.{mode}").gradient(loss, [fixed, good])
        g_fixed, g_good = run(matched, mode)
        close(f"{mode} usable after a mismatch (same names)", g_fixed, np.full(2, MEAN_FACTOR), n * MEAN_FACTOR)

        # A submission rejected locally (Average of bool) raises at the wait, after the good one.
        def local_failure():
            ok = gradients.submit_grouped_allreduce([tf.constant([1.0, 2.0])], bf.Sum, f"local.{mode}.ok")
            rejected = gradients.submit_grouped_allreduce([tf.constant([True])], bf.Average, f"local.{mode}.bool")
            return gradients.wait([ok, rejected], f"local.{mode}.wait")
        try:
            run(local_failure, mode)
            raised = None
        except Exception as error:  # noqa: BLE001 - the type is what is checked
            raised = error
        check(f"{mode} local rejection raises InvalidArgumentError (refused: on every rank)",
              isinstance(raised, (bf.InvalidArgumentError, tf.errors.InvalidArgumentError)),
              f"{type(raised).__name__}: {str(raised)[:300]}")
        check(f"{mode} local rejection message", "bool" in str(raised), str(raised)[:300])
        again = run(lambda: gradients.wait([gradients.submit_grouped_allreduce([tf.constant([1.0, 2.0])], bf.Sum,
                                                                                 f"local.{mode}.ok")],
                                           f"local.{mode}.again"), mode)
        close(f"{mode} the good bucket was synchronized (its name is free again)", again[0][0], [float(n), 2.0 * n])


def case_the_sparse_agreement_runs_once_backprop_has_begun(rank, size):
    """The agreement blocks its thread until every rank reaches it; it must wait for the first
    gradient, so every rank reaches it at the same point of its step."""
    from blinkflow.runtime import api

    events = []

    @tf.custom_gradient
    def backprop_begins(y):
        def grad(dy):
            # Also takes y: on its own dy is a constant, which grappler would fold at trace time.
            return tf.numpy_function(lambda d, _: events.append("backprop") or d, [dy, y], dy.dtype, stateful=False)
        return tf.identity(y), grad

    unused = tf.Variable(np.zeros(3, np.float32))  # last source, its gradient None: zeros stand in

    def step_of(sources):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                x = tf.numpy_function(lambda v: events.append("forward") or v, [x_in], tf.float32, stateful=False)
                x.set_shape(x_in.shape)
                y = x
                for w in weights:
                    y = tf.tanh(tf.matmul(y, w))
                loss = tf.reduce_sum(backprop_begins(y))
            return hvd.DistributedGradientTape(tape).gradient(loss, sources)
        return step

    original = api.allreduce_async

    def recording(*args, **kwargs):
        if str(kwargs.get("name", "")).endswith(".sparse_agreement"):
            events.append("agreement")
        return original(*args, **kwargs)

    api.allreduce_async = recording
    try:
        for what, sources in [("", weights), ("with a None gradient last: ", weights + [unused])]:
            step = step_of(sources)
            for _ in range(3):
                events.clear()
                step()
                check(f"agreement: {what}each of forward, backprop and agreement ran once",
                      sorted(events) == ["agreement", "backprop", "forward"], events)
                check(f"agreement: {what}it ran after backprop began", events[-1:] == ["agreement"], events)
    finally:
        api.allreduce_async = original


def case_tensors_took_the_backends_route(rank, size):
    ROUTE.expect(at_least=20)


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
