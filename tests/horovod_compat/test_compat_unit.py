"""The compatibility runner's pure parts: the import mapping, the failure classes, and the facts
behind the units judged not a fair check."""
import os
import sys

import numpy as np
import pytest

from blinkflow import scaling

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import classify  # noqa: E402
import import_map  # noqa: E402


def test_horovod_names_are_blinkflow_modules_and_private_ones_say_so():
    pytest.importorskip("tensorflow")
    import_map.install()
    import blinkflow.tensorflow
    import blinkflow.tensorflow.keras
    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvd_keras
    from horovod.tensorflow.util import _executing_eagerly

    assert hvd is blinkflow.tensorflow and hvd_keras is blinkflow.tensorflow.keras
    assert _executing_eagerly() is True
    import horovod.runner.launch as launch

    with pytest.raises(import_map.HorovodInternal, match="horovod.runner.launch.gloo_built"):
        launch.gloo_built  # noqa: B018


@pytest.mark.parametrize("test, text, label", [
    ("f.py::T::test_x_gpu", "anything", classify.GPU),
    ("f.py::T::test_x", "HorovodInternal: Horovod internal: horovod.runner.x", classify.INTERNAL),
    ("f.py::T::test_x", "AttributeError: module 'blinkflow.tensorflow' has no attribute '_executing_eagerly'",
     classify.INTERNAL),
    ("f.py::T::test_x", "AttributeError: 'Variable' object has no attribute 'ref'", classify.KERAS2),
    ("f.py::T::test_x", "AssertionError: 1 != 2", classify.REAL),
])
def test_failures_are_classified_by_their_text(test, text, label):
    assert classify.classify(test, text)[0] == label


def test_a_judged_unit_is_not_applicable_only_at_its_world_sizes():
    test = "test_tensorflow.py::TensorFlowTests::test_horovod_allreduce_average_cpu"
    assert classify.classify(test, "AssertionError: incorrect results", 3)[0] == classify.UNFAIR
    assert classify.classify(test, "AssertionError: incorrect results", 2)[0] == classify.REAL
    assert classify.classify(test, "AssertionError: incorrect results")[0] == classify.REAL


# The facts behind the "not a fair check" judgements, on the tests' own shapes (17**3 float32).
def _floats(seed=0):
    return np.random.RandomState(seed).uniform(-100, 100, 17 ** 3).astype(np.float32)


def test_horovods_float32_average_at_three_ranks_is_not_the_tests_reference():
    """Horovod's ScaleBuffer multiplies a float32 sum by ``(float)(1.0 / 3)``; the test wants
    ``(x * 3) / 3``. blinkflow's average is Horovod's product, bit for bit."""
    x = _floats()
    summed = (x + x) + x
    horovod = summed * np.float32(1.0 / 3)
    ours = summed.copy()
    scaling.average(ours, 3)
    np.testing.assert_array_equal(ours, horovod)
    assert (horovod != summed / np.float32(3)).sum() > 300  # of 4913: about 1 in 9
    assert (horovod != x).sum() > 300


def test_a_float32_product_depends_on_the_order_ranks_meet():
    a, b, c = _floats(0), _floats(1), _floats(2)
    assert ((a * b) * c != a * (b * c)).sum() > 100


def test_grappler_folds_the_prescale_reference_of_a_graph():
    """In a TF1 graph, TensorFlow's default rewrites turn the tests' ``(f * x) * 3`` into
    ``x * (3 * f)``: not the prescale-then-sum order of Horovod (and blinkflow)."""
    tf = pytest.importorskip("tensorflow")
    x, factor = _floats(), 0.1915194503788923  # the tests' np.random.seed(1234); uniform()
    with tf.Graph().as_default() as graph:
        fed = tf.compat.v1.placeholder(tf.float32, x.shape)
        reference = (tf.convert_to_tensor(factor, tf.float32) * fed) * 3
    with tf.compat.v1.Session(graph=graph) as session:
        got = session.run(reference, {fed: x})
    scaled = x * np.float32(factor)
    np.testing.assert_array_equal(got, x * (np.float32(factor) * np.float32(3)))
    assert (got != (scaled + scaled) + scaled).sum() > 300
