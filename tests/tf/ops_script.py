"""Every TF collective's values and gradients, eagerly and inside tf.function, on tf.Tensor,
tf.Variable and Keras variables; grouped ops; compression; DistributedGradientTape (dense and
IndexedSlices); broadcast_variables; errors; and the route the tensors took (through the host,
or by DLPack into the cuda backend when the job's backend is cuda). Case script of the harness
(tests/harness.py), run with other TF case scripts in one launch (tests/tf/tf_jobs.py).
"""
import numpy as np
import tensorflow as tf

from script_checks import MODES, Route, check, close, run  # noqa: I100 (TF's threads set first)

import keras  # noqa: E402

import blinkflow as bf  # noqa: E402
import blinkflow.tensorflow as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
ROUTE = Route()


def mean_over_ranks(f):
    return sum(f(q) for q in range(n)) / n


def magnitude(f):
    """The summed magnitudes of every rank's input ``f(q)``: what a reduction's rounding scales with."""
    return sum(np.abs(np.asarray(f(q), np.float64)) for q in range(n))


def case_allreduce_on_a_variable_with_its_gradient(rank, size):
    for mode in MODES:
        x = tf.Variable(np.arange(4, dtype=np.float32) + r)
        for op, combine in ((bf.Average, mean_over_ranks), (bf.Sum, lambda f: sum(f(q) for q in range(n)))):
            def step(op=op):
                with tf.GradientTape() as tape:
                    y = hvd.allreduce(x, op=op)
                    loss = tf.reduce_sum(y * float(r + 1))
                return y, tape.gradient(loss, x)
            y, g = run(step, mode)
            close(f"{mode} allreduce {op.name}", y, combine(lambda q: np.arange(4) + q),
                  magnitude(lambda q: np.arange(4) + q))
            close(f"{mode} allreduce {op.name} grad", g, np.full(4, combine(lambda q: q + 1.0)),
                  magnitude(lambda q: q + 1.0))


def case_keras_variable_min_max_product_scale_and_fp16(rank, size):
    for mode in MODES:
        kv = keras.Variable(np.full((2, 2), r + 1.0, dtype="float32"))

        def reductions():
            return (hvd.allreduce(kv, op=bf.Min), hvd.allreduce(kv, op=bf.Max), hvd.allreduce(kv, op=bf.Product),
                    hvd.allreduce(kv, op=bf.Sum, prescale_factor=2.0, postscale_factor=0.25),
                    hvd.allreduce(kv, compression=bf.Compression.fp16))
        mn, mx, prod, scaled, fp16 = run(reductions, mode)
        close(f"{mode} min", mn, np.full((2, 2), 1.0))
        close(f"{mode} max", mx, np.full((2, 2), float(n)))
        close(f"{mode} product", prod, np.full((2, 2), float(np.prod(np.arange(1, n + 1)))))
        close(f"{mode} scaled", scaled, np.full((2, 2), 0.5 * n * (n + 1) / 2))
        check(f"{mode} fp16 dtype", fp16.dtype == tf.float32, fp16.dtype)
        close(f"{mode} fp16", fp16, np.full((2, 2), (n + 1) / 2.0), magnitude(lambda q: q + 1.0), rounding="float16")


def case_grouped_allreduce_of_mixed_dtypes_with_gradients(rank, size):
    for mode in MODES:
        a = tf.Variable(np.ones(3, np.float32) * r)
        b = tf.Variable(np.ones((2, 2), np.float64) * (r + 1))
        c = tf.constant([r, 2 * r], dtype=tf.int32)

        def grouped():
            with tf.GradientTape() as tape:
                ya, yb, yc = hvd.grouped_allreduce([a, b, c], op=bf.Sum)
                loss = tf.cast(tf.reduce_sum(ya), tf.float64) + tf.reduce_sum(yb) * float(r + 1)
            return ya, yb, yc, tape.gradient(loss, [a, b])
        ya, yb, yc, (ga, gb) = run(grouped, mode)
        total = n * (n - 1) / 2
        close(f"{mode} grouped a", ya, np.full(3, total))
        close(f"{mode} grouped b", yb, np.full((2, 2), total + n))
        close(f"{mode} grouped int", yc, np.array([total, 2 * total]).astype(np.int32))
        check(f"{mode} grouped int dtype", yc.dtype == tf.int32)
        close(f"{mode} grouped grad a", ga, np.full(3, float(n)))
        close(f"{mode} grouped grad b", gb, np.full((2, 2), total + n))


def case_allgather_of_uneven_rows_with_its_gradient(rank, size):
    for mode in MODES:
        xg = tf.Variable(np.full((r + 1, 3), float(r), np.float32))

        def gather():
            with tf.GradientTape() as tape:
                y = hvd.allgather(xg)
                loss = tf.reduce_sum(y * float(r + 1))
            return y, tape.gradient(loss, xg)
        y, g = run(gather, mode)
        close(f"{mode} allgather", y, np.concatenate([np.full((q + 1, 3), float(q)) for q in range(n)]))
        close(f"{mode} allgather grad", g, np.full((r + 1, 3), (n + 1) / 2.0), magnitude(lambda q: q + 1.0))
        ys = run(lambda: hvd.grouped_allgather([xg, tf.constant([[r]] * 2)]), mode)
        close(f"{mode} grouped_allgather ints", ys[1], np.repeat(np.arange(n), 2)[:, None].astype(np.int32))


def case_broadcast_from_every_root_with_its_gradient(rank, size):
    for mode in MODES:
        xb = tf.Variable(np.arange(3, dtype=np.float32) * (r + 1))
        for root in range(n):
            def bcast(root=root):
                with tf.GradientTape() as tape:
                    y = hvd.broadcast(xb, root)
                    loss = tf.reduce_sum(y * float(r + 1))
                return y, tape.gradient(loss, xb)
            y, g = run(bcast, mode)
            close(f"{mode} broadcast root {root}", y, np.arange(3) * (root + 1))
            close(f"{mode} broadcast grad root {root}", g, np.full(3, (n + 1) / 2.0 if r == root else 0.0),
                  magnitude(lambda q: q + 1.0))


def case_reducescatter_with_an_extra_row_and_its_gradient(rank, size):
    for mode in MODES:
        rows = 2 * n + 1  # rank 0 gets one row more
        xr = tf.Variable(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (r + 1))
        counts = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
        start = sum(counts[:r])

        def scatter():
            with tf.GradientTape() as tape:
                y = hvd.reducescatter(xr)
                loss = tf.reduce_sum(y * float(r + 1))
            return y, tape.gradient(loss, xr)
        y, g = run(scatter, mode)
        full = lambda q: np.arange(rows * 2).reshape(rows, 2) * (q + 1.0)  # noqa: E731
        close(f"{mode} reducescatter", y, mean_over_ranks(full)[start:start + counts[r]],
              magnitude(full)[start:start + counts[r]])
        # Horovod's gradient: the all-gathered output gradients (times the set's size for Sum; for
        # Average not divided by it).
        close(f"{mode} reducescatter grad", g, np.concatenate([np.full((counts[q], 2), q + 1.0) for q in range(n)]))


def case_alltoall_with_splits_and_its_gradient(rank, size):
    for mode in MODES:
        # i+1 rows to rank i, marker 100*source + destination.
        splits = [i + 1 for i in range(n)]
        xa = tf.Variable(np.concatenate([np.full((i + 1, 1), 100.0 * r + i) for i in range(n)]).astype(np.float32))

        def a2a():
            with tf.GradientTape() as tape:
                y, received = hvd.alltoall(xa, splits=splits)
                # weight of a row received from rank j: 10*(r+1) + j
                weights = tf.repeat(tf.constant([10.0 * (r + 1) + j for j in range(n)]), received)[:, None]
                loss = tf.reduce_sum(y * weights)
            return y, received, tape.gradient(loss, xa)
        y, received, g = run(a2a, mode)
        close(f"{mode} alltoall", y, np.concatenate([np.full((r + 1, 1), 100.0 * j + r) for j in range(n)]))
        close(f"{mode} alltoall splits", received, np.full(n, r + 1).astype(np.asarray(received).dtype))
        close(f"{mode} alltoall grad", g, np.concatenate([np.full((i + 1, 1), 10.0 * (i + 1) + r) for i in range(n)]))
        even = run(lambda: hvd.alltoall(tf.constant(np.arange(2 * n, dtype=np.int64) + 10 * r)), mode)
        close(f"{mode} alltoall even", even,
              np.concatenate([[10 * j + 2 * r, 10 * j + 2 * r + 1] for j in range(n)]).astype(np.int64))


def case_gradient_tape_dense_and_indexed_slices(rank, size):
    for mode in MODES:
        w = tf.Variable(np.ones((4, 2), np.float32))
        emb = tf.Variable(np.zeros((5, 2), np.float32))

        def tape_step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(w) * float(r + 1) + tf.reduce_sum(tf.gather(emb, [r % 5, 4]))
            dtape = hvd.DistributedGradientTape(tape)
            gw, gemb = dtape.gradient(loss, [w, emb])
            return gw, tf.convert_to_tensor(gemb), isinstance(gemb, tf.IndexedSlices)
        gw, gemb, sparse = run(tape_step, mode)
        close(f"{mode} tape dense", gw, np.full((4, 2), (n + 1) / 2.0), magnitude(lambda q: q + 1.0))
        want = np.zeros((5, 2))
        for q in range(n):
            want[q % 5] += 1.0 / n
            want[4] += 1.0 / n
        close(f"{mode} tape sparse", gemb, want, n * 2.0)
        check(f"{mode} tape keeps IndexedSlices", bool(sparse))


def case_broadcast_variables_of_tf_and_keras(rank, size):
    for mode in MODES:
        tv = tf.Variable(np.full(3, float(r), np.float32))
        kvar = keras.Variable(np.full((2,), float(r) * 2, dtype="float32"))
        root = n - 1
        if mode == "function":
            tf.function(lambda: hvd.broadcast_variables([tv, kvar], root_rank=root))()
        else:
            hvd.broadcast_variables([tv, kvar], root_rank=root)
        close(f"{mode} broadcast_variables tf", tv.numpy(), np.full(3, float(root)))
        close(f"{mode} broadcast_variables keras", kvar.numpy(), np.full(2, 2.0 * root))


def case_a_mismatch_is_the_blinkflow_error_eagerly_and_tfs_in_a_graph(rank, size):
    for mode in MODES:
        bad = tf.zeros([r + 1], tf.float32)
        expected = bf.TensorMismatchError if mode == "eager" else tf.errors.FailedPreconditionError
        try:
            run(lambda: hvd.allreduce(bad, name=f"mismatch.{mode}"), mode)
            raised = None
        except Exception as error:  # noqa: BLE001 - the type is what is checked
            raised = error
        check(f"{mode} mismatch raises {expected.__name__}", isinstance(raised, expected),
              f"{type(raised).__name__}: {str(raised)[:300]}")
        check(f"{mode} mismatch message", f"mismatch.{mode}" in str(raised), str(raised)[:300])
        after = run(lambda: hvd.allreduce(tf.constant([1.0]), op=bf.Sum), mode)
        close(f"{mode} usable after mismatch", after, [float(n)])


def case_tensors_took_the_backends_route(rank, size):
    """Every tensor above crossed by DLPack into the cuda backend (BLINKFLOW_BACKEND=cuda routes
    host tensors as a GPU's would be), with no host conversion and the cuda backend moving the
    data; or, on the cpu backend, through the host."""
    route = ROUTE.expect(at_least=50)
    if route == "device":
        from blinkflow.runtime import api as rt

        backends = rt.RUNTIME.engine._backends
        check("the cuda backend ran the collectives",
              "cuda" in backends and sum(backends["cuda"].state.sent.values()) > 0, sorted(backends))
        check("the cpu backend moved nothing", not any(backends["cpu"].state.sent.values()), backends["cpu"].state.sent)


def case_numpy_stays_numpy(rank, size):
    out = hvd.allreduce(np.array([r], dtype=np.float64), op=bf.Sum, name="numpy.sum")
    check("numpy in, numpy out", isinstance(out, np.ndarray), type(out))
    close("numpy sum", out, [n * (n - 1) / 2])


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
