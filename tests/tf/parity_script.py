"""Horovod's TensorFlow API as issue 17 lists it, row by row (one case per row), eagerly, in
tf.function and in TF1-style graphs run by tf.compat.v1.Session. The job's ranks form two
process sets, evens and odds; every rank can compute every rank's input. Case script of the
harness (tests/harness.py), run with other TF case scripts in one launch (tests/tf/tf_jobs.py).
"""
import os
import tempfile
import warnings

import numpy as np
import tensorflow as tf

from script_checks import Route, check, close  # noqa: I100 (TF's threads set first)

import keras  # noqa: E402

import blinkflow as bf  # noqa: E402
import blinkflow.keras as hk  # noqa: E402
import blinkflow.tensorflow as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

N = job_rank_size()[1]
if hvd.is_initialized():  # an earlier script of this launch started the job: register the sets now
    EVEN, ODD = hvd.add_process_set(list(range(0, N, 2))), hvd.add_process_set(list(range(1, N, 2)))
else:
    EVEN, ODD = hvd.ProcessSet(range(0, N, 2)), hvd.ProcessSet(range(1, N, 2))
    hvd.init(process_sets=[EVEN, ODD])
r, n = hvd.rank(), hvd.size()
mine, ranks = (EVEN, list(range(0, n, 2))) if r % 2 == 0 else (ODD, list(range(1, n, 2)))
k = len(ranks)
MODES = ("eager", "function", "graph")
ROUTE = Route()


def run(fn, mode):
    """``fn()`` eagerly, as a tf.function, or built in a TF1 tf.Graph and run by a Session."""
    if mode == "eager":
        return fn()
    if mode == "function":
        return tf.function(fn)()
    graph = tf.Graph()
    with graph.as_default():
        out = fn()
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(init)
            return session.run(out)


def raises(label, kinds, fn, *hints):
    """The error ``fn()`` raises: one of ``kinds``, its message holding every hint."""
    try:
        fn()
    except kinds as e:
        check(label, all(h in str(e) for h in hints), str(e)[:300])
        return e
    except Exception as e:  # noqa: BLE001 - any other type is the failure being tested
        raise AssertionError(f"{label}: {type(e).__name__}: {str(e)[:300]}") from e
    raise AssertionError(f"{label}: no error")


def value(q, shape=(4,), dtype=np.float32, salt=0):
    return (np.arange(int(np.prod(shape))).reshape(shape) % 5 + 2 * q + salt).astype(dtype)


def summed(q_range, **kwargs):
    return sum(value(q, **kwargs) for q in q_range)


def case_process_sets_every_op_and_gradients(rank, size):
    x_set = tf.Variable(value(r))
    for mode in MODES:
        got = run(lambda: hvd.allreduce(tf.constant(value(r)), op=hvd.Sum, process_set=mine), mode)
        close(f"sets {mode} allreduce", got, sum(value(q) for q in ranks))
        got = run(lambda: hvd.allreduce(tf.constant(value(r)), process_set=mine), mode)
        close(f"sets {mode} allreduce average over the set", got, sum(value(q) for q in ranks) / k, summed(ranks))
        got = run(lambda: hvd.grouped_allreduce([tf.constant(value(r)), tf.constant(value(r, (2,), np.int32))],
                                                op=hvd.Max, process_set=mine), mode)
        close(f"sets {mode} grouped", got[1], value(max(ranks), (2,), np.int32))
        got = run(lambda: hvd.allgather(tf.constant(value(r, (r + 1, 2))), process_set=mine), mode)
        close(f"sets {mode} allgather", got, np.concatenate([value(q, (q + 1, 2)) for q in ranks]))
        for root in ranks:
            got = run(lambda root=root: hvd.broadcast(tf.constant(value(r)), root, process_set=mine), mode)
            close(f"sets {mode} broadcast root {root}", got, value(root))
        got = run(lambda: hvd.reducescatter(tf.constant(value(r, (2 * k, 3))), op=hvd.Sum, process_set=mine), mode)
        me = ranks.index(r)
        close(f"sets {mode} reducescatter", got, sum(value(q, (2 * k, 3)) for q in ranks)[2 * me:2 * me + 2])
        out = run(lambda: hvd.alltoall(tf.constant(np.repeat(np.arange(k) + 10 * r, 2).astype(np.float32)),
                                       splits=[2] * k, process_set=mine), mode)
        close(f"sets {mode} alltoall", out[0], np.repeat([10 * q + me for q in ranks], 2))
        close(f"sets {mode} size_op", run(lambda: hvd.size_op(process_set_id=mine.process_set_id), mode), k)
        close(f"sets {mode} included_op", run(lambda: hvd.process_set_included_op(EVEN.process_set_id), mode),
              int(r % 2 == 0))
        close(f"sets {mode} included_op unknown", run(lambda: hvd.process_set_included_op(99), mode), -3)

        def set_grad():
            with tf.GradientTape() as tape:
                y = hvd.allreduce(x_set, op=hvd.Sum, process_set=mine)
                loss = tf.reduce_sum(y)
            return tape.gradient(loss, x_set)
        if mode != "graph":
            close(f"sets {mode} allreduce grad", run(set_grad, mode), np.full(4, float(k)))
        else:
            def graph_grad():  # TF1 style: tf.gradients
                x = tf.constant(value(r))
                y = hvd.allgather(x, process_set=mine)
                return tf.gradients(y, x, tf.ones_like(y))[0]
            close("sets graph allgather grad", run(graph_grad, mode), np.ones(4))


def case_a_set_of_one_rank_and_unknown_sets(rank, size):
    alone = hvd.add_process_set([n - 1]) if n > 2 else ODD  # a set of one rank (at 2 ranks: the odd set)
    if r == n - 1:
        close("sets of one rank", hvd.allreduce(tf.constant(value(r)), op=hvd.Sum, process_set=alone), value(r))
    else:
        raises("sets not a member: tf InvalidArgumentError", tf.errors.InvalidArgumentError,
               lambda: hvd.allreduce(tf.constant(value(r)), process_set=alone), f"rank {r} is not in process set")
    fake = hvd.ProcessSet([0])
    fake.process_set_id = 10
    raises("sets unknown set: ValueError", ValueError, lambda: hvd.allreduce(tf.ones(2), process_set=fake),
           "not registered")
    if alone is not ODD:
        check("sets removed", hvd.remove_process_set(alone))


def case_gradient_tape_over_a_set(rank, size):
    with tf.GradientTape() as tape:
        x0 = tf.constant(float(r))
        tape.watch(x0)
        y0 = x0 * x0
    dy = hvd.DistributedGradientTape(tape, process_set=EVEN).gradient(y0, [x0])[0] if r % 2 == 0 else None
    if r % 2 == 0:
        close("sets DistributedGradientTape(process_set=)", dy, 2.0 * sum(EVEN.ranks) / EVEN.size(), 2.0 * sum(EVEN.ranks))


def case_tf1_session_of_many_independent_collectives(rank, size):
    # ---- row: TF1 graphs: a Session.run of many independent collectives (its executor starts them in
    # another order on each rank: blocking kernels deadlocked here, at 1 and at 2 inter-op threads) ----
    graph = tf.Graph()
    with graph.as_default():
        many = [hvd.allreduce(tf.constant(np.full(3, float(r + i), np.float32)), op=hvd.Sum) for i in range(16)]
        many += [hvd.allgather(tf.constant(np.full((1, 2), float(r + i), np.float32))) for i in range(4)]
        many += [hvd.allreduce(tf.constant(value(r)), op=hvd.Sum, process_set=mine)]
        bad = hvd.allreduce(tf.ones([r + 1]), name="tf1.mismatch")
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            for _ in range(3):
                got = session.run(many)
            close("tf1 many independent collectives", got[15], np.full(3, float(sum(range(n)) + 15 * n)))
            close("tf1 many: set member", got[-1], sum(value(q) for q in ranks))
            raises("tf1 mismatch: FailedPreconditionError at run", tf.errors.FailedPreconditionError,
                   lambda: session.run(bad), "tf1.mismatch")
            close("tf1 after the error", session.run(many[0]), np.full(3, float(sum(range(n)))))


def case_build_queries_and_timeline(rank, size):
    # ---- row: build and capability queries; timeline ---------------------------------------------------
    check("queries", hvd.mpi_built() and hvd.mpi_enabled() and not hvd.gloo_built() and not hvd.gloo_enabled()
          and hvd.nccl_built() == 0 and not hvd.ddl_built() and not hvd.ccl_built() and not hvd.rocm_built()
          and not hvd.sycl_built() and isinstance(hvd.cuda_built(), bool), "")
    check("queries threads/homogeneous", isinstance(hvd.mpi_threads_supported(), bool) and hvd.is_homogeneous() is True)
    check("queries cross", hvd.cross_size() == 1 and hvd.cross_rank() == 0 and hvd.is_initialized())
    folder = hvd.broadcast_object(tempfile.mkdtemp() if r == 0 else None, 0)
    path = os.path.join(folder, "timeline.json")
    hvd.start_timeline(path)
    hvd.allreduce(tf.ones(3), name="timeline.tensor")
    hvd.stop_timeline()
    mine_path = path if r == 0 else path.replace(".json", f".rank{r}.json")
    with open(mine_path) as f:
        check("timeline start/stop", "timeline.tensor" in f.read())


def case_rank_and_size_ops(rank, size):
    # ---- row: rank/size graph ops ------------------------------------------------------------------------
    for mode in MODES:
        got = run(lambda: [hvd.size_op(), hvd.rank_op(), hvd.local_size_op(), hvd.local_rank_op()], mode)
        close(f"rank ops {mode}", np.array(got), [n, r, n, r])


def case_deprecated_arguments_warn_once_and_work(rank, size):
    # ---- row: deprecated arguments warn once and work ----------------------------------------------------
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("ignore")  # only the first use may show: warn_once forces it through
        a = hvd.allreduce(tf.constant(value(r)), average=False)
        hvd.allreduce(tf.constant(value(r)), average=False)
    deprecations = [w for w in seen if issubclass(w.category, DeprecationWarning) and "average" in str(w.message)]
    check("deprecated average= warns once", len(deprecations) == 1, [str(w.message) for w in seen])
    close("deprecated average=False sums", a, sum(value(q) for q in range(n)))
    got = hvd.grouped_allreduce([tf.constant(value(r))], average=True)[0]
    close("deprecated grouped average=True", got, sum(value(q) for q in range(n)) / n, summed(range(n)))
    raises("deprecated op and average: ValueError", ValueError,
           lambda: hvd.allreduce(tf.ones(1), op=hvd.Sum, average=True), "supersedes")
    close("deprecated numpy average=False", hvd.allreduce(value(r), average=False), sum(value(q) for q in range(n)))


def case_indexed_slices(rank, size):
    # ---- row: IndexedSlices in grouped calls; scale factors and Min/Max/Product NotImplementedError ----
    for mode in ("eager", "function", "graph"):
        def mixed():
            s = tf.IndexedSlices(tf.constant(value(r, (2, 3))), tf.constant([r, r + 1]), tf.constant([n + 1, 3]))
            dense_out, sparse_out = hvd.grouped_allreduce([tf.constant(value(r)), s], op=hvd.Sum)
            return dense_out, tf.convert_to_tensor(sparse_out)
        dense_out, sparse_dense = run(mixed, mode)
        close(f"slices {mode} grouped dense member", dense_out, sum(value(q) for q in range(n)))
        want = np.zeros((n + 1, 3), np.float32)
        for q in range(n):
            want[q:q + 2] += value(q, (2, 3))
        close(f"slices {mode} grouped sparse member", sparse_dense, want)
    s = tf.IndexedSlices(tf.constant(value(r, (1, 2))), tf.constant([0]), tf.constant([1, 2]))
    for scales in ({"prescale_factor": 3.0}, {"postscale_factor": 0.5}):
        raises(f"slices with {scales}: NotImplementedError", NotImplementedError,
               lambda scales=scales: hvd.allreduce(s, **scales), "scale factors")
        raises(f"grouped slices with {scales}: NotImplementedError", NotImplementedError,
               lambda scales=scales: hvd.grouped_allreduce([tf.ones(1), s], **scales), "scale factors")
    for op in (hvd.Min, hvd.Max, hvd.Product):
        raises(f"slices {op.name} NotImplementedError", NotImplementedError, lambda op=op: hvd.allreduce(s, op=op),
               "Average and Sum")
    no_shape = tf.IndexedSlices(tf.constant(value(r, (1, 2))), tf.constant([r]))  # no dense_shape (Horovod's tests)
    dense_out, sparse_out = hvd.grouped_allreduce([tf.constant(value(r)), no_shape], op=hvd.Sum)
    check("slices without dense_shape stay sparse", isinstance(sparse_out, tf.IndexedSlices), type(sparse_out))
    close("slices without dense_shape: values", sparse_out.values, np.concatenate([value(q, (1, 2)) for q in range(n)]))
    close("slices without dense_shape: indices", sparse_out.indices, np.arange(n))
    close("slices then the next call pairs", hvd.allreduce(tf.ones(1), op=hvd.Sum, name="after.slices"), [float(n)])


def case_error_types_eagerly(rank, size):
    # ---- row: error types eagerly (tf.errors, still blinkflow's classes) -----------------------------
    e = raises("errors alltoall without splits: tf InvalidArgumentError", tf.errors.InvalidArgumentError,
               lambda: hvd.alltoall(tf.ones([n + 1, 2])), "not divisible by the number of ranks")
    check("errors alltoall is blinkflow's too", isinstance(e, bf.InvalidArgumentError), type(e).__mro__)
    e = raises("errors mismatch: tf FailedPreconditionError", tf.errors.FailedPreconditionError,
               lambda: hvd.allreduce(tf.ones([r + 1]), name="mismatch.eager"), "mismatch.eager")
    check("errors mismatch is a TensorMismatchError", isinstance(e, bf.TensorMismatchError) and e.name == "mismatch.eager")
    raises("errors 0-d reducescatter", (tf.errors.InvalidArgumentError, ValueError),
           lambda: hvd.reducescatter(tf.constant(1.0)), "0-d")


def case_scale_factors_bit_for_bit_with_horovod(rank, size):
    # ---- row: scale factors on float16 / integers, bit for bit with Horovod (<= 3 ranks) ---------------
    rng = np.random.RandomState(1234)
    factor = rng.uniform()
    # (int8 only on the host route: the cuda backend's kernels do not reduce it.)
    for dtype in (tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.float32):
        if dtype == tf.int8 and os.environ.get("BLINKFLOW_BACKEND") == "cuda":
            continue
        high = 1 if dtype in (tf.uint8, tf.int8) else 100
        x = tf.cast(rng.uniform(0 if dtype == tf.uint8 else -high, high, size=(17, 17)), dtype)
        wide = tf.float32 if dtype == tf.float16 else tf.float64 if dtype.is_integer else dtype
        summed = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor)
        want = tf.cast(tf.cast(factor, wide) * tf.cast(x, wide), dtype) * n
        check(f"scale prescale {dtype.name}", np.array_equal(summed.numpy(), want.numpy()), "")
        summed = hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor)
        want = tf.cast(tf.cast(factor, wide) * tf.cast(x * n, wide), dtype)
        check(f"scale postscale {dtype.name}", np.array_equal(summed.numpy(), want.numpy()), "")


def case_reducescatter_scaling_grouped_and_gradients(rank, size):
    # ---- row: reduce-scatter: scale factors, grouped, Horovod's gradients --------------------------------
    rows = 2 * n
    for mode in MODES:
        got = run(lambda: hvd.reducescatter(tf.constant(value(r, (rows,))), op=hvd.Sum, prescale_factor=0.5,
                                            postscale_factor=3.0), mode)
        mine_rows = slice(2 * r, 2 * r + 2)
        close(f"reducescatter {mode} scaled", got, (sum(value(q, (rows,)) * 0.5 for q in range(n)) * 3.0)[mine_rows],
              1.5 * summed(range(n), shape=(rows,))[mine_rows])
        got = run(lambda: hvd.grouped_reducescatter([tf.constant(value(r, (rows,))), tf.constant(value(r, (rows, 2)))],
                                                    op=hvd.Average), mode)
        close(f"reducescatter {mode} grouped", got[1], (sum(value(q, (rows, 2)) for q in range(n)) / n)[mine_rows],
              summed(range(n), shape=(rows, 2))[mine_rows])
    for op, per in ((hvd.Sum, float(n)), (hvd.Average, 1.0)):
        xv = tf.Variable(value(r, (rows, 2)))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(hvd.reducescatter(xv, op=op))
        close(f"reducescatter grad {op.name} (Horovod's scaling)", tape.gradient(loss, xv), np.full((rows, 2), per))


def case_in_place_broadcast_and_local_sources(rank, size):
    # ---- row: in place and local parts ----------------------------------------------------------------
    for mode in ("eager", "function", "graph"):
        v_outside = tf.Variable(value(r)) if mode != "graph" else None

        def in_place():
            v = v_outside if v_outside is not None else tf.Variable(value(r))
            out = hvd.broadcast_([v], n - 1)
            if mode == "graph":
                return out
            return [tf.convert_to_tensor(v)]
        close(f"broadcast_ {mode}", run(in_place, mode)[0], value(n - 1))
        if v_outside is not None:
            close(f"broadcast_ {mode} assigned in place", v_outside, value(n - 1))
    w_shared, w_local = tf.Variable(np.ones(2, np.float32)), tf.Variable(np.ones(2, np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w_shared * float(r + 1)) + tf.reduce_sum(w_local * float(r + 1))
    dtape = hvd.DistributedGradientTape(tape)
    dtape.register_local_source(w_local)
    g_shared, g_local = dtape.gradient(loss, [w_shared, w_local])
    close("register_local_source shared", g_shared, np.full(2, (n + 1) / 2), n * (n + 1) / 2)
    close("register_local_source local (scaled by 1/size)", g_local, np.full(2, (r + 1.0) / n), r + 1.0)
    check("blinkflow.keras alias", hk is __import__("blinkflow.tensorflow.keras").tensorflow.keras
          and hk.DistributedOptimizer is hvd.DistributedOptimizer)


def case_partial_optimizers_global_variables_objects_and_elastic(rank, size):
    # ---- row: more API: Partial*, broadcast_global_variables, broadcast_object_fn, elastic --------------
    keras.utils.set_random_seed(r)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="local"), keras.layers.Dense(1)])
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[model.layers[0]])
    xs = tf.constant(np.full((1, 3), float(r + 1), np.float32))
    before = [v.numpy().copy() for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(xs))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply(grads, model.trainable_variables)
    moved = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
    close("PartialDistributedOptimizer local layer keeps its own gradient", moved[0], grads[0].numpy() / n,
          np.abs(before[0]) + np.abs(grads[0].numpy()))
    tape_p = hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=model.layers[0])
    check("PartialDistributedGradientTape", isinstance(tape_p, hvd.DistributedGradientTape))
    raises("broadcast_global_variables eagerly: RuntimeError", RuntimeError, lambda: hvd.broadcast_global_variables(0),
           "eager")
    graph = tf.Graph()
    with graph.as_default():
        gv = tf.compat.v1.get_variable("gv", initializer=tf.constant(value(r)))
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(bcast)
            close("broadcast_global_variables in a TF1 session", session.run(gv), value(0))
    fn = hvd.broadcast_object_fn(root_rank=n - 1)
    check("broadcast_object_fn", fn({"from": r}) == {"from": n - 1})
    check("broadcast_object process_set", hvd.broadcast_object(r, ranks[0], process_set=mine) == ranks[0])
    check("allgather_object process_set", hvd.allgather_object(r, process_set=mine) == ranks)
    elastic_state = hvd.elastic.TensorFlowKerasState(model, epoch=r)
    hvd.elastic.run(lambda state: None)(elastic_state)  # syncs from rank 0 first, as after every reset
    check("elastic run syncs the state from rank 0", elastic_state.epoch == 0)
    elastic_state.commit()  # no host changed: no HostsUpdatedInterrupt
    check("keras elastic callbacks", isinstance(hk.elastic.CommitStateCallback(elastic_state), keras.callbacks.Callback))


def case_tf1_train_optimizers_over_the_job_and_a_set(rank, size):
    # TF1's tf.compat.v1.train optimizers (Horovod's _DistributedOptimizer), over the job and over a set.
    for label, process_set, members in (("job", None, list(range(n))), ("set", mine, ranks)):
        graph = tf.Graph()
        with graph.as_default():
            w = tf.compat.v1.get_variable("w", initializer=[0.0])
            dist = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), process_set=process_set)
            train = dist.minimize(tf.reduce_sum(w * float(r + 1)))
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
                close(f"legacy optimizer over the {label}", session.run(w),
                      [-sum(q + 1.0 for q in members) / len(members)], sum(q + 1.0 for q in members))
    check("legacy optimizer type", type(dist).__name__ == "LegacyDistributedOptimizer", type(dist))


def case_gradient_aggregation_and_local_variables_of_the_callback(rank, size):
    # ---- row: gradient aggregation: sums N passes unless average_aggregated_gradients; iterations --------
    for average in (False, True):
        var = keras.Variable(np.zeros(2, np.float32))
        agg = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=2,
                                       average_aggregated_gradients=average)
        for step in range(4):
            agg.apply([tf.constant(np.full(2, float(r + 1 + step), np.float32))], [var])
        # Steps 0+1 and 2+3 are summed; each sum averaged over ranks; / 2 with average_aggregated_gradients.
        per_rank = [(q + 1) + (q + 2) + (q + 3) + (q + 4) for q in range(n)]
        want = -np.full(2, sum(per_rank) / n / (2 if average else 1))
        close(f"aggregation average_aggregated_gradients={average}", var.numpy(), want, sum(per_rank))
        check(f"aggregation iterations count every call ({average})", int(agg.iterations.numpy()) == 4,
              int(agg.iterations.numpy()))
    keras.utils.set_random_seed(10 + r)  # ranks start from different weights
    model2 = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    kept = model2.layers[0].kernel.numpy().copy()
    cb = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[model2.layers[0].kernel])
    cb.set_model(model2)
    cb.on_train_batch_end(0)
    root_weights = hvd.broadcast_object([v.numpy() for v in model2.variables], 0)
    close("BroadcastGlobalVariablesCallback(local_variables=) keeps the local one", model2.layers[0].kernel, kept)
    close("BroadcastGlobalVariablesCallback broadcasts the others", model2.layers[1].kernel, root_weights[2])


def case_tensors_took_the_backends_route(rank, size):
    """Every TF tensor above, TF1 graphs included, crossed into the runtime the backend's way."""
    ROUTE.expect(at_least=50)


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
