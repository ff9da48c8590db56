"""Single-process checks of the TF bindings that need no MPI job."""
import subprocess
import sys

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def test_import_blinkflow_does_not_import_tensorflow():
    code = "import sys, blinkflow; blinkflow.Compression; print('tensorflow' in sys.modules, 'mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_alias_modules_serve_horovod_names_without_starting_mpi():
    code = ("import sys; import blinkflow.tensorflow.keras as hvd; "
            "names = [hvd.DistributedOptimizer, hvd.DistributedGradientTape, hvd.broadcast_variables, hvd.load_model, "
            "hvd.allreduce, hvd.Average, hvd.Compression.fp16, hvd.callbacks.BroadcastGlobalVariablesCallback, "
            "hvd.callbacks.MetricAverageCallback, hvd.callbacks.LearningRateWarmupCallback]; "
            "import blinkflow; assert blinkflow.DistributedOptimizer is hvd.DistributedOptimizer; "
            "assert blinkflow.callbacks.MetricAverageCallback is hvd.callbacks.MetricAverageCallback; "
            "print('mpi4py' in sys.modules, callable(hvd.init), 'init' in dir(hvd))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-3:] == ["False", "True", "True"]


def test_optimizer_config_round_trip_and_validation():
    import blinkflow as bf
    from blinkflow.tensorflow import DistributedOptimizer

    opt = DistributedOptimizer(keras.optimizers.Adam(0.003, beta_1=0.8), op=bf.Sum,
                               compression=bf.Compression.fp16, backward_passes_per_step=3)
    config = opt.get_config()
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(opt))
    assert isinstance(clone, DistributedOptimizer) and clone.get_config() == config
    assert clone.compression is bf.Compression.fp16 and clone.op is bf.Sum and clone.backward_passes_per_step == 3
    assert clone.beta_1 == pytest.approx(0.8)  # hyperparameters read through to the inner optimizer
    opt.learning_rate = 0.5
    assert float(opt.inner_optimizer.learning_rate.numpy()) == pytest.approx(0.5)
    with pytest.raises(bf.BlinkflowError):
        DistributedOptimizer(object())
    with pytest.raises(bf.BlinkflowError):
        DistributedOptimizer(opt)
    with pytest.raises(bf.BlinkflowError):
        DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0)


def test_graph_names_are_deterministic_per_function():
    from blinkflow.tensorflow import _naming

    def names():
        seen = []

        @tf.function
        def f():
            seen.append((_naming.default_name("allreduce"), _naming.default_name("allreduce")))
            return tf.constant(0)

        f.get_concrete_function()
        return seen[0]

    first, second = names(), names()
    assert first == second and first[0] != first[1]
    assert _naming.default_name("x") != _naming.default_name("x")  # eager: a counter


def test_the_device_route_synchronises_after_the_collective_even_for_empty_outputs(monkeypatch):
    """TensorFlow may reuse the inputs' memory and reads the outputs once the bridge returns: one
    device sync must come after the collective, also when the last output is empty (a rank with
    no rows of a reduce-scatter; it used to ride on the last output's conversion)."""
    from blinkflow.backends.cuda import dlpack
    from blinkflow.tensorflow import _bridge

    class Array:
        __module__ = "cupy._core.core"

        def __init__(self, n):
            self.size, self.shape = n, (n,)
            self.data = type("Data", (), {"ptr": 256})()

    events = []
    monkeypatch.setattr(dlpack, "tf_to_cupy", lambda t, sync=True: (Array(int(tf.size(t))), t.dtype.name))
    monkeypatch.setattr(dlpack, "cupy_to_tf", lambda a, dtype_name=None, sync=True: events.append(("out", sync))
                        or tf.zeros(a.shape))
    monkeypatch.setattr(_bridge, "_synchronize", lambda: events.append(("sync",)))
    monkeypatch.setattr(_bridge, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_bridge, "_device_possible", lambda: True)
    out = _bridge._run_eager(lambda arrays: events.append(("collective",)) or [Array(5), Array(0)],
                             [tf.ones([5]), tf.ones([0])], [tf.float32, tf.float32])
    assert [o.shape.as_list() for o in out] == [[5], [0]]
    assert events == [("collective",), ("sync",), ("out", False)], events
