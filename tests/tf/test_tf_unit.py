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


def test_horovod_names_exist_without_starting_mpi_and_keras_alias_is_one_module():
    code = ("import sys, warnings; import blinkflow.tensorflow as hvd; import blinkflow.keras as k; "
            "import blinkflow.tensorflow.keras as tk; assert k is tk; "
            "names = [hvd.ProcessSet, hvd.global_process_set, hvd.add_process_set, hvd.remove_process_set, "
            "hvd.size_op, hvd.rank_op, hvd.local_size_op, hvd.local_rank_op, hvd.process_set_included_op, "
            "hvd.broadcast_, hvd.grouped_reducescatter, hvd.broadcast_global_variables, hvd.broadcast_object_fn, "
            "hvd.BroadcastGlobalVariablesHook, hvd.PartialDistributedOptimizer, hvd.PartialDistributedGradientTape, "
            "hvd.elastic.run, k.elastic.KerasState, hvd.start_timeline, hvd.is_homogeneous]; "
            "print('mpi4py' in sys.modules, hvd.mpi_built(), hvd.nccl_built(), hvd.gloo_built())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-4:] == ["False", "True", "0", "False"]


def test_graph_names_of_a_process_set_are_a_family_of_their_own():
    """A rank that traces another set's ops must not shift the global set's graph names."""
    from blinkflow.tensorflow import _naming

    def names(with_set_op):
        seen = []

        @tf.function
        def f():
            if with_set_op:
                seen.append(_naming.default_name("allreduce", 2))
            seen.append(_naming.default_name("allreduce"))
            return tf.constant(0)

        f.get_concrete_function()
        return seen

    assert names(True)[-1] == names(False)[-1]
    assert ".ps2" in names(True)[0]


def test_errors_on_tf_tensors_are_both_classes():
    import blinkflow as bf
    from blinkflow.tensorflow._errors import as_tf_error

    mismatch = as_tf_error(bf.TensorMismatchError("ranks disagree", "t"))
    assert isinstance(mismatch, bf.TensorMismatchError) and isinstance(mismatch, tf.errors.FailedPreconditionError)
    assert mismatch.name == "t" and str(mismatch) == "ranks disagree"
    refused = as_tf_error(bf.InvalidArgumentError("refused by rank 1"))
    assert isinstance(refused, tf.errors.InvalidArgumentError) and isinstance(refused, bf.InvalidArgumentError)
    gone = as_tf_error(bf.ShutdownError("peer left", rank=3))
    assert isinstance(gone, tf.errors.AbortedError) and gone.rank == 3
    unsupported = as_tf_error(bf.NotSupportedError("Min of IndexedSlices"))
    assert isinstance(unsupported, NotImplementedError) and isinstance(unsupported, tf.errors.UnimplementedError)


def test_deprecated_average_warns_once_and_maps_to_an_op():
    import warnings

    import blinkflow as bf
    from blinkflow.tensorflow import _deprecated

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("ignore")
        assert _deprecated.op_from(None, False, "unit.allreduce") is bf.Sum
        assert _deprecated.op_from(None, True, "unit.allreduce") is bf.Average
    assert len([w for w in seen if issubclass(w.category, DeprecationWarning)]) == 1
    assert seen[0].filename == __file__  # the warning points at the caller, not at blinkflow
    with pytest.raises(ValueError, match="supersedes"):
        _deprecated.op_from(bf.Sum, True, "unit.allreduce")
    assert _deprecated.op_from(None, None, "unit.allreduce") is bf.Average


def test_the_device_route_synchronises_after_the_collective_even_for_empty_outputs(monkeypatch):
    """TensorFlow may reuse the inputs' memory and reads the outputs once the bridge returns: one
    device sync must come after the collective, also when the last output is empty (a rank with
    no rows of a reduce-scatter; it used to ride on the last output's conversion)."""
    from blinkflow.backends.cuda import dlpack
    from blinkflow.tensorflow import _bridge

    class Array:
        __cuda_array_interface__ = {"version": 3}  # a GPU array, as the bridge recognises one

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
