"""Single-process checks of gradient buckets: the planner (pure) and the control edges that make
TensorFlow submit a bucket as soon as backprop has produced it (no MPI job needed)."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from blinkflow.tensorflow import buckets  # noqa: E402
from blinkflow.tensorflow.submit_order import SubmitOrder  # noqa: E402

Item = buckets.Item


def test_buckets_close_once_full_in_production_order():
    items = [Item(5, 100), Item(4, 30), Item(3, 80), Item(2, 10), Item(1, 500), Item(0, 1)]
    units = buckets.plan(items, cap=100)
    assert [u.indices for u in units] == [[5], [4, 3], [2, 1], [0]]
    assert not any(u.sparse for u in units)


def test_cap_zero_is_one_bucket_and_every_gradient_is_placed_once():
    items = [Item(i, n) for i, n in zip(range(9, -1, -1), [7, 1, 300, 2, 2, 50, 0, 9, 1, 4])]
    assert [u.indices for u in buckets.plan(items, cap=0)] == [list(range(9, -1, -1))]
    for cap in (1, 3, 64, 1000):
        placed = [i for u in buckets.plan(items, cap) for i in u.indices]
        assert placed == list(range(9, -1, -1))


def test_sparse_gradients_travel_alone_ahead_of_the_filling_bucket():
    items = [Item(4, 10), Item(3, None, sparse=True), Item(2, 10), Item(1, 10), Item(0, 10)]
    units = buckets.plan(items, cap=20)
    assert [(u.indices, u.sparse) for u in units] == [([3], True), ([4, 2], False), ([1, 0], False)]


def test_a_shape_known_only_at_run_time_closes_its_bucket():
    items = [Item(2, 4), Item(1, None), Item(0, 4)]
    assert [u.indices for u in buckets.plan(items, cap=100)] == [[2, 1], [0]]
    assert [u.indices for u in buckets.plan(items, cap=0)] == [[2, 1, 0]]
    with pytest.raises(ValueError):
        buckets.plan(items, cap=-1)


def _chain_graph():
    """x -> layer1 -> layer2 -> loss in a graph, with the gradients of both weights."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.ones((2, 3), np.float32))
        w1 = tf.constant(np.ones((3, 3), np.float32))
        w2 = tf.constant(np.ones((3, 1), np.float32))
        h = tf.tanh(tf.matmul(x, w1))
        loss = tf.reduce_sum(tf.matmul(h, w2))
        g1, g2 = tf.gradients(loss, [w1, w2])
        submit = tf.identity(g2, name="submit_of_last_layer").op
    return graph, submit, g1, g2


def _depends_on(op, target, seen=None):
    seen = set() if seen is None else seen
    if op is target:
        return True
    if op in seen:
        return False
    seen.add(op)
    return any(_depends_on(i, target, seen) for i in [t.op for t in op.inputs] + list(op.control_inputs))


def test_the_rest_of_backprop_waits_for_the_earlier_bucket_and_no_cycle_forms():
    graph, submit, g1, g2 = _chain_graph()
    assert not _depends_on(g1.op, submit)  # before: the first layer's gradient ignores the submit
    added = SubmitOrder().submit_before(submit, [g1])
    assert added >= 1
    assert _depends_on(g1.op, submit)  # after: it cannot be computed before the submit ran
    assert not _depends_on(g2.op, submit)  # the submit's own inputs are untouched (no cycle)
    with tf.compat.v1.Session(graph=graph) as session:
        got1, got2 = session.run([g1, g2])  # a cycle would make the graph unrunnable
    assert np.all(np.isfinite(got1)) and got2.shape == (3, 1)


def test_an_op_the_submit_needs_is_never_made_to_wait_for_it():
    graph, submit, g1, g2 = _chain_graph()
    # The "later" tensors are all needed by the submit itself: nothing may be gated.
    assert SubmitOrder().submit_before(submit, [g2]) == 0


def test_submits_inside_a_traced_step_are_gated_in_order():
    """In a real tf.function step the bucket of the last layer is submitted before the backprop
    of the first layer runs: every op computing the first layer's gradient depends on it."""
    layers = [tf.Variable(np.full((4, 4), 0.1 * (i + 1), np.float32)) for i in range(3)]
    seen = {}

    def fake_submit(tensors, name):  # no runtime: an int64 op standing for the submit
        handle = tf.numpy_function(lambda *a: np.int64(7), list(tensors), tf.int64, stateful=True, name="submit")
        seen[name] = handle.op
        return handle

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y = tf.ones((2, 4))
            for w in layers:
                y = tf.tanh(tf.matmul(y, w))
            loss = tf.reduce_sum(y)
        grads = tape.gradient(loss, layers)
        produced = list(reversed(grads))  # last layer first
        order = SubmitOrder()
        handles = []
        for k, g in enumerate(produced):
            handles.append(fake_submit([g], f"b{k}"))
            if k + 1 < len(produced):
                order.submit_before(handles[-1].op, [produced[k + 1]])
        return grads, handles

    concrete = step.get_concrete_function()
    grads = [t for t in concrete.outputs if t.dtype == tf.float32]
    assert len(seen) == 3
    # The first layer's gradient (grads[0]) depends on the submits of both later layers.
    first = concrete.graph.get_operation_by_name(grads[0].op.name)
    assert _depends_on(first, seen["b0"]) and _depends_on(first, seen["b1"])
    assert not _depends_on(seen["b0"], seen["b1"])
    step()  # runs: no cycle


def test_kinds_fill_buckets_of_their_own_and_open_buckets_end_in_order():
    items = [Item(5, 8, kind="float32"), Item(4, 4, kind="float16"), Item(3, 8, kind="float32"),
             Item(2, 4, kind="float16"), Item(1, 1, kind="float32"), Item(0, 1, kind="float16")]
    assert [u.indices for u in buckets.plan(items, cap=16)] == [[5, 3], [1], [4, 2, 0]]
    assert [u.indices for u in buckets.plan(items, cap=0)] == [[5, 3, 1], [4, 2, 0]]


def test_a_group_crosses_back_as_one_flat_view_of_the_runtimes_buffer():
    from blinkflow.tensorflow.gradients import flat_view

    buffer = np.arange(20, dtype=np.float32)
    members = [buffer[0:6].reshape(2, 3), buffer[6:7].reshape(()), buffer[7:15].reshape(2, 2, 2)]
    flat = flat_view(members)
    assert np.shares_memory(flat, buffer) and flat.shape == (15,)
    np.testing.assert_array_equal(flat, buffer[:15])
    apart = [buffer[0:6].reshape(2, 3), buffer[8:10]]  # a gap: copied, values kept
    copied = flat_view(apart)
    assert not np.shares_memory(copied, buffer)
    np.testing.assert_array_equal(copied, np.concatenate([buffer[0:6], buffer[8:10]]))
    strided = [buffer[0:6:2], buffer[6:9]]  # not contiguous: copied
    np.testing.assert_array_equal(flat_view(strided), np.concatenate([buffer[0:6:2], buffer[6:9]]))
