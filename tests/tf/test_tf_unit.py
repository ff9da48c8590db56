"""Single-process checks of the TF bindings that need no MPI job."""
import contextlib
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


def test_the_callbacks_module_has_every_path_and_exports_only_the_callbacks():
    """One module of callbacks under Horovod's paths (``hvd.callbacks`` of the TF and the Keras
    bindings, ``blinkflow.callbacks``, ``import blinkflow.tensorflow.callbacks``), whose ``*``
    brings the callbacks and nothing of its own imports."""
    code = ("import blinkflow, blinkflow.tensorflow as hvd, blinkflow.tensorflow.keras as k; "
            "import blinkflow.tensorflow.callbacks as c; from blinkflow.tensorflow.callbacks import MetricAverageCallback; "
            "assert c is hvd.callbacks is k.callbacks is blinkflow.callbacks; "
            "assert MetricAverageCallback is c.MetricAverageCallback; "
            "scope = {}; exec('from blinkflow.tensorflow.keras.callbacks import *', scope); "
            "print(' '.join(sorted(n for n in scope if n != '__builtins__')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-6:] == ["AlignEpochsCallback", "BestModelCheckpoint", "BroadcastGlobalVariablesCallback",
                                "LearningRateScheduleCallback", "LearningRateWarmupCallback", "MetricAverageCallback"]
    assert len(out.split("\n")[-2].split()) == 6, out


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


def _names_in_control_flow():
    """The automatic names drawn while tracing fresh functions with a tf.range loop, a
    tf.while_loop, a tf.cond, a dataset loop, a nested function in a cond, an XLA-compiled loop
    and a TF1 graph's while loop."""
    from blinkflow.tensorflow import _naming

    seen = []

    def name(tag):
        seen.append((tag, _naming.default_name("allreduce")))
        return tf.constant(1.0)

    @tf.function
    def range_loop(steps):
        s = tf.constant(0.0)
        for _ in tf.range(steps):
            s += name("range") + name("range, second call")
        return s

    @tf.function
    def while_loop():
        return tf.while_loop(lambda x: x < 3.0, lambda x: x + name("while"), [tf.constant(0.0)])

    @tf.function
    def cond(flag):
        return tf.cond(flag, lambda: name("true"), lambda: name("false"))

    @tf.function
    def dataset_loop():
        s = tf.constant(0.0)
        for _ in tf.data.Dataset.range(2):
            s += name("dataset")
        return s

    @tf.function
    def inner():
        return name("nested function")

    @tf.function
    def outer(flag):
        return tf.cond(flag, inner, lambda: tf.constant(0.0))

    @tf.function(jit_compile=True)
    def compiled(steps):
        s = tf.constant(0.0)
        for _ in tf.range(steps):
            s += tf.cond(s > 1.0, lambda: name("xla true"), lambda: name("xla false"))
        return s

    range_loop.get_concrete_function(tf.TensorSpec([], tf.int32))
    while_loop.get_concrete_function()
    cond.get_concrete_function(tf.TensorSpec([], tf.bool))
    dataset_loop.get_concrete_function()
    outer.get_concrete_function(tf.TensorSpec([], tf.bool))
    compiled.get_concrete_function(tf.TensorSpec([], tf.int32))
    with tf.Graph().as_default():
        tf.while_loop(lambda x: x < 3.0, lambda x: x + name("TF1 while"), [tf.constant(0.0)])
    return seen


def _trace_unrelated_functions(count):
    for k in range(count):
        @tf.function
        def logging_step(x):
            y = tf.while_loop(lambda i: i < 3, lambda i: i + 1, [x])[0]
            return tf.cond(y > 0, lambda: y, lambda: -y)

        logging_step(tf.constant(k))


def test_graph_names_in_control_flow_do_not_depend_on_what_else_was_traced():
    """TensorFlow numbers control-flow bodies with a process-wide counter (while_body_23): a
    rank that traced more functions first must still name its collectives as the others do."""
    first = _names_in_control_flow()
    _trace_unrelated_functions(3)
    again = _names_in_control_flow()
    assert again == first
    names = dict(first)
    assert names["range"] == "range_loop/while/blinkflow.allreduce"
    assert names["range, second call"] == "range_loop/while/blinkflow.allreduce_1"
    assert names["while"] == "while_loop/while/blinkflow.allreduce"
    assert (names["true"], names["false"]) == ("cond/cond/blinkflow.allreduce", "cond/cond/blinkflow.allreduce_1")
    assert names["dataset"] == "dataset_loop/dataset/blinkflow.allreduce"
    assert names["nested function"] == "inner/blinkflow.allreduce"  # a function of its own, not outer's
    assert names["xla false"] == "compiled/while/cond/blinkflow.allreduce_1"
    assert names["TF1 while"] == "graph/while/blinkflow.allreduce"
    assert len(set(names.values())) == len(names)


def test_graph_names_leave_out_name_scopes():
    """Keras names layers (and their scopes) with process-wide counters: dense_3 on a rank that
    built one more model. Neither a call's name nor its gradient's depends on the scope."""
    from blinkflow.tensorflow import _naming, differentiable

    def names(scope):
        seen = []

        @tf.function
        def f():
            with tf.name_scope(scope):
                seen.append(_naming.default_name("allreduce"))
                seen.append(differentiable.gradient_name(seen[0]))
                seen.append(differentiable.gradient_name(seen[0]))
            return tf.constant(0)

        f.get_concrete_function()
        return seen

    assert names("dense_3") == names("dense") == ["f/blinkflow.allreduce", "f/blinkflow.allreduce/grad",
                                                  "f/blinkflow.allreduce/grad_1"]
    assert differentiable.gradient_name("x") == differentiable.gradient_name("x") == "x/grad"  # eager


def test_function_names_lose_tensorflows_counter():
    from blinkflow.tensorflow import _naming
    from tensorflow.python.framework.func_graph import FuncGraph

    assert _naming.function_name(FuncGraph("__backward_step_1234")) == "step.backward"
    assert _naming.function_name(FuncGraph("__inference_train_step_77")) == "train_step.inference"
    assert _naming.function_name(FuncGraph("step_2")) == "step_2"
    assert _naming.function_name(tf.Graph()) == "graph"


def test_an_automatic_runtime_name_drawn_while_tracing_is_refused():
    """A runtime call (numpy arrays, objects) in a traced function runs when a rank traces it, so
    its automatic name cannot agree across ranks: refused, before any name is drawn."""
    import blinkflow as bf
    from blinkflow.runtime.global_state import RUNTIME
    from blinkflow.tensorflow import _naming  # noqa: F401 (registers the guard)

    @tf.function
    def traced():
        RUNTIME.auto_name("allreduce")
        return tf.constant(0)

    with pytest.raises(bf.NotSupportedError, match="while a tf.function was being traced"):
        traced.get_concrete_function()
    assert RUNTIME.auto_name("allreduce").startswith("allreduce.noname.")  # eagerly: drawn
    with tf.Graph().as_default():   # a TF1 graph being built runs Python calls as written
        assert RUNTIME.auto_name("allreduce").startswith("allreduce.noname.")


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
    from blinkflow.tensorflow.crossing.errors import as_tf_error

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
    """TensorFlow may reuse the inputs' memory and reads the outputs once the crossing returns: one
    device sync must come after the collective, also when the last output is empty (a rank with
    no rows of a reduce-scatter; it used to ride on the last output's conversion)."""
    from blinkflow import placement
    from blinkflow.backends.cuda import dlpack
    from blinkflow.tensorflow.crossing import arrays, eager

    class Array:
        __cuda_array_interface__ = {"version": 3}  # a GPU array, as the crossing recognises one

        def __init__(self, n):
            self.size, self.shape = n, (n,)
            self.data = type("Data", (), {"ptr": 256})()

    events = []
    monkeypatch.setattr(dlpack, "tf_to_cupy", lambda t, sync=True: Array(int(tf.size(t))))
    monkeypatch.setattr(dlpack, "cupy_to_tf", lambda a, sync=True: events.append(("out", sync))
                        or tf.zeros(a.shape))
    monkeypatch.setattr(arrays, "_synchronize", lambda: events.append(("sync",)))
    monkeypatch.setattr(arrays, "_rank_device_scope", contextlib.nullcontext)
    monkeypatch.setattr(placement, "on_gpu", lambda t: True)
    monkeypatch.setattr(placement, "tensors_may_go_to_device", lambda: True)
    out = eager.call(lambda ins: events.append(("collective",)) or [Array(5), Array(0)],
                     [tf.ones([5]), tf.ones([0])], [tf.float32, tf.float32], [[5], [0]], "empty_last")
    assert [o.shape.as_list() for o in out] == [[5], [0]]
    assert events == [("collective",), ("sync",), ("out", False)], events
