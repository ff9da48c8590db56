"""The compatibility runner's pure parts: the import mapping and the failure classes."""
import os
import sys

import pytest

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
