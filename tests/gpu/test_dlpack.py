"""TF GPU tensors reach CuPy and come back through DLPack without a copy (needs TensorFlow
built with CUDA; skipped when TensorFlow is missing or sees no GPU)."""
import numpy as np
import pytest


@pytest.fixture(scope="module")
def tf():
    tf = pytest.importorskip("tensorflow")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU (tensorflow-cpu build?)")
    return tf


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_round_trip_shares_memory(tf, dtype):
    import cupy

    from blinkflow.backends.cuda.dlpack import cupy_to_tf, tf_to_cupy

    with tf.device("/GPU:0"):
        t = tf.cast(tf.range(1000), getattr(tf, dtype))
    array = tf_to_cupy(t)
    assert array.size == 1000 and array.dtype == np.dtype(dtype)
    back = cupy_to_tf(array)
    assert back.dtype == t.dtype
    np.testing.assert_array_equal(back.numpy().astype(np.float64), t.numpy().astype(np.float64))
    # zero copy: writing through the cupy view shows up in the tensor made from it
    array[0] = array[1]
    cupy.cuda.Device().synchronize()
    assert float(cupy_to_tf(array)[0]) == float(t[1])


def test_cpu_tensor_is_refused(tf):
    from blinkflow.backends.cuda.dlpack import tf_to_cupy
    from blinkflow.errors import BackendError

    with tf.device("/CPU:0"):
        t = tf.ones(4)
    with pytest.raises(BackendError, match="GPU"):
        tf_to_cupy(t)
