"""Horovod's TensorFlow semantics, case by case, at 2 and 3 ranks (test_gradient_rows.py). Case
script of the harness (tests/harness.py), run with other TF case scripts in one launch
(tests/tf/tf_jobs.py), under two inter-op threads, so the grouped gradients' collectives of one
graph step may run side by side.

Every gradient runs the same collectives on every rank, eagerly, in a tf.function and in a TF1
graph run by a Session that fetches the gradient alone (a rank that skips its collective there
leaves the others waiting: the job's stall shutdown ends it); the gradients of grouped calls
taken once per output (one ``tf.gradients`` each, all run in one step, Horovod's pattern); an
all-to-all without splits whose ranks have different first dimensions; a rank outside a process
set passing its gradients through (DistributedGradientTape, the TF1 DistributedOptimizer);
``allreduce(IndexedSlices)`` refusing scale factors; the process-set errors' classes in TF1
graphs; ``BroadcastGlobalVariablesCallback(local_variables=)``; ``opt.variables()`` (Keras 2).
"""
import numpy as np
import tensorflow as tf

import script_checks  # noqa: F401, I100 (TF's threads set first: two inter-op threads in its jobs)

import keras  # noqa: E402

import blinkflow.tensorflow as hvd  # noqa: E402
from harness import close  # noqa: E402

hvd.init()

MODES = ("eager", "function", "graph")


def gradients(forward, xs, grad_ys, mode):
    """The gradients of ``forward(xs)``'s outputs (a list) with respect to ``xs``, one
    ``tf.gradients`` per output in a graph (each output's gradient of its own input), as
    numpy; ``grad_ys`` gives each output's gradient."""
    def eager_or_function():
        sources = [tf.convert_to_tensor(x) for x in xs]
        with tf.GradientTape(persistent=True) as tape:
            for s in sources:
                tape.watch(s)
            ys = forward(sources)
        return [tape.gradient(y, s, tf.constant(g)) for y, s, g in zip(ys, sources, grad_ys)]

    if mode == "eager":
        return [g.numpy() for g in eager_or_function()]
    if mode == "function":
        return [g.numpy() for g in tf.function(eager_or_function)()]
    graph = tf.Graph()
    with graph.as_default():
        sources = [tf.constant(x) for x in xs]
        ys = forward(sources)
        grads = [tf.gradients(y, s, tf.constant(g))[0] for y, s, g in zip(ys, sources, grad_ys)]
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run(grads)  # the gradients alone: the forward ran in the graph already


def case_broadcast_gradient_runs_on_every_rank(rank, size):
    x = np.full((2, 3), rank + 1.0, np.float32)
    dy = np.full((2, 3), rank + 1.0, np.float32)
    for mode in MODES:
        for root in range(size):
            # Named per root: a rank that skipped its gradient's collective cannot pair with
            # the next root's by accident.
            got, = gradients(lambda xs, root=root, mode=mode: [hvd.broadcast(xs[0], root, name=f"{mode}.bcast.{root}")],
                             [x], [dy], mode)
            want = np.full((2, 3), (size + 1) / 2.0 if rank == root else 0.0)
            close(got, want, what=f"{mode} broadcast gradient, root {root}")


def case_grouped_broadcast_gradient_runs_on_every_rank(rank, size):
    xs = [np.full(3, rank + 1.0, np.float32), np.full((2, 2), rank + 1.0, np.float64)]
    for mode in MODES:
        got = gradients(lambda t, mode=mode: hvd.grouped_broadcast(t, size - 1, name=f"{mode}.grouped_bcast"), xs,
                        [x * 2 for x in xs], mode)
        for g, x in zip(got, xs):
            close(g, np.full(x.shape, (size + 1.0) if rank == size - 1 else 0.0), what=f"{mode} grouped broadcast")


def case_allreduce_gradients_every_mode(rank, size):
    x = np.full(4, rank + 1.0, np.float32)
    total = size * (size + 1) / 2.0
    for mode in MODES:
        for op, want in ((hvd.Sum, total), (hvd.Average, total / size)):
            got, = gradients(lambda t, op=op: [hvd.allreduce(t[0], op=op)], [x], [x], mode)
            close(got, np.full(4, want), what=f"{mode} allreduce {op.name} gradient")
        got = gradients(lambda t: hvd.grouped_allreduce(t, op=hvd.Sum), [x, x * 2], [x, x], mode)
        for g in got:
            close(g, np.full(4, total), what=f"{mode} grouped_allreduce gradient, one tf.gradients per output")


def case_allgather_gradients_every_mode(rank, size):
    """Rank r gathers r + 1 rows; each output's gradient is rank-dependent, so the averaged
    gradient of this rank's rows says every rank ran the all-reduce."""
    rows = sum(q + 1 for q in range(size))
    x = np.full((rank + 1, 2), float(rank), np.float32)
    dy = np.full((rows, 2), rank + 1.0, np.float32)
    for mode in MODES:
        got, = gradients(lambda t: [hvd.allgather(t[0])], [x], [dy], mode)
        close(got, np.full((rank + 1, 2), (size + 1) / 2.0), what=f"{mode} allgather gradient")
        got = gradients(lambda t: hvd.grouped_allgather(t), [x, x.astype(np.float64)], [dy, dy.astype(np.float64)],
                        mode)
        for g in got:
            close(g, np.full((rank + 1, 2), (size + 1) / 2.0), what=f"{mode} grouped_allgather gradient")


def case_reducescatter_gradients_every_mode(rank, size):
    x = np.ones((2 * size, 3), np.float32)
    dy = np.full((2, 3), rank + 1.0, np.float32)
    want = np.repeat(np.arange(1.0, size + 1), 2)[:, None] * np.ones((1, 3))
    for mode in MODES:
        for op, scale in ((hvd.Sum, size), (hvd.Average, 1)):
            got, = gradients(lambda t, op=op: [hvd.reducescatter(t[0], op=op)], [x], [dy], mode)
            close(got, want * scale, what=f"{mode} reducescatter {op.name} gradient")
        got = gradients(lambda t: hvd.grouped_reducescatter(t, op=hvd.Sum), [x, x.astype(np.float64)],
                        [dy, dy.astype(np.float64)], mode)
        for g in got:
            close(g, want * size, what=f"{mode} grouped_reducescatter gradient, one tf.gradients per output")


def case_alltoall_gradients_every_mode(rank, size):
    """With splits, and without: rank r has size * (r + 1) rows and sends r + 1 to each rank, so
    it receives 1, 2, ..., size rows: the gradient goes back by the rows received, not sent."""
    x = np.full((size, 2), float(rank), np.float32)
    dy = np.full((size, 2), rank + 1.0, np.float32)
    uneven = np.full((size * (rank + 1), 2), float(rank), np.float32)
    received = sum(q + 1 for q in range(size))
    for mode in MODES:
        got, = gradients(lambda t: [hvd.alltoall(t[0], splits=[1] * size)[0]], [x], [dy], mode)
        close(got, np.arange(1.0, size + 1)[:, None] * np.ones((1, 2)), what=f"{mode} alltoall gradient, splits")
        got, = gradients(lambda t: [hvd.alltoall(t[0])], [uneven], [np.ones((received, 2), np.float32)], mode)
        close(got, np.ones_like(uneven), what=f"{mode} alltoall gradient, even splits of uneven first dimensions")


def case_rank_outside_the_set_passes_gradients_through(rank, size):
    members = hvd.add_process_set(list(range(size - 1)))
    try:
        for mode in ("eager", "function"):
            def step():
                x = tf.constant(np.full(3, rank + 1.0, np.float32))
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = tf.reduce_sum(x * x)
                return hvd.DistributedGradientTape(tape, process_set=members).gradient(y, [x])[0]

            got = step() if mode == "eager" else tf.function(step)()
            mean_over_members = 2.0 * sum(q + 1 for q in range(size - 1)) / (size - 1)
            want = 2.0 * (rank + 1) if rank == size - 1 else mean_over_members
            close(got, np.full(3, want), what=f"{mode} DistributedGradientTape outside/inside the set")
        graph = tf.Graph()
        with graph.as_default():
            w = tf.compat.v1.Variable(np.full(3, rank + 1.0, np.float32))
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), process_set=members)
            (grad, _), = opt.compute_gradients(tf.reduce_sum(w * w), var_list=[w])
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got = session.run(grad)
        close(got, np.full(3, want), what="TF1 DistributedOptimizer outside/inside the set")
    finally:
        hvd.remove_process_set(members)


def case_indexed_slices_refuse_scale_factors(rank, size):
    s = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([rank]), tf.constant([size, 2]))
    for scales in ({"prescale_factor": 2.0}, {"postscale_factor": 0.5}):
        for call in (lambda: hvd.allreduce(s, **scales), lambda: hvd.grouped_allreduce([tf.ones(2), s], **scales)):
            try:
                call()
            except NotImplementedError as error:
                assert "scale factors" in str(error), error
            else:
                raise AssertionError(f"allreduce(IndexedSlices, {scales}) did not raise NotImplementedError")
    got = hvd.allreduce(tf.ones(2), op=hvd.Sum)  # the next call pairs on every rank
    close(got, np.full(2, float(size)), what="the call after the refusals")


def case_process_set_errors_in_tf1_graphs(rank, size):
    """Horovod's classes: a set this rank is not in -> tf InvalidArgumentError; a set that is
    not registered -> ValueError."""
    alone = hvd.add_process_set([size - 1])
    try:
        graph = tf.Graph()
        with graph.as_default():
            out = hvd.allreduce(tf.ones(4), process_set=alone)
            with tf.compat.v1.Session(graph=graph) as session:
                if rank == size - 1:
                    close(session.run(out), np.ones(4), what="a set of one rank")
                else:
                    try:
                        session.run(out)
                    except tf.errors.InvalidArgumentError as error:
                        assert "not in process set" in str(error), error
                    else:
                        raise AssertionError("no InvalidArgumentError for a set this rank is not in")
        fake = hvd.ProcessSet([0])
        fake.process_set_id = 10
        graph = tf.Graph()
        with graph.as_default():
            try:
                with tf.compat.v1.Session(graph=graph) as session:
                    session.run(hvd.allreduce(tf.ones(4), process_set=fake))
            except ValueError as error:
                assert "not registered" in str(error), error
            else:
                raise AssertionError("no ValueError for a process set that is not registered")
    finally:
        hvd.remove_process_set(alone)


def case_broadcast_callback_keeps_local_variables(rank, size):
    root = size - 1
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(3, kernel_initializer=keras.initializers.Constant(rank),
                                                 bias_initializer=keras.initializers.Constant(rank), trainable=False),
                              keras.layers.Dense(2, kernel_initializer=keras.initializers.Constant(rank),
                                                 bias_initializer=keras.initializers.Constant(rank), trainable=False)])
    model.compile(loss="mse", optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    local = list(model.layers[0].variables)
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=root, local_variables=local)
    model.fit(np.ones((2, 3)), np.ones((2, 2)), batch_size=2, epochs=1, verbose=0, callbacks=[callback])
    local_ids = {id(v) for v in local}
    for v in model.variables:
        want = rank if id(v) in local_ids else root
        close(np.asarray(v), np.full(v.shape, float(want)), what=f"{v.path} after the broadcast")
    later = hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=0)
    later.register_local_var(model.layers[1].kernel)
    try:
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.ones(2)])
    except ValueError as error:
        assert "variables" in str(error), error
    else:
        raise AssertionError("local_variables of arrays accepted")


def case_optimizer_variables_callable_as_in_keras_2(rank, size):
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    w = keras.Variable(np.ones(2, np.float32))
    opt.apply([tf.ones(2)], [w])
    as_property = list(opt.variables)
    as_call = list(opt.variables())
    assert len(as_call) == len(as_property) > 0 and all(a is b for a, b in zip(as_call, as_property)), \
        (as_call, as_property)
    hvd.broadcast_variables(opt.variables(), root_rank=0)
