"""Run alone by tests/mpi/test_data_plane_safety_fake_cupy.py: a result handed to TensorFlow by
DLPack (``blinkflow.backends.cuda.dlpack.cupy_to_tf``) must not go back to CuPy's memory pool
while a kernel TensorFlow queued on its own stream may still read it. The fake CuPy's pool
(tests/fake_cupy/cupy/_pool.py) reuses blocks as CuPy's does and refuses one TensorFlow took
until the device was synchronised. A case script of the harness (tests/harness.py)."""
import gc

import tensorflow as tf  # first: the fake CuPy then makes TF's DLPack speak CUDA capsules

import cupy

from blinkflow.backends.cuda import dlpack
from harness import run_cases

N = 4096


def case_a_result_tf_let_go_of_is_not_reused_before_a_device_synchronize(rank, size):
    result = cupy.full(N, 3, cupy.float32)
    where = result.data.ptr
    tensor = dlpack.cupy_to_tf(result)
    total = float(tf.reduce_sum(tensor))  # TF reads it (on a GPU: queued on TF's stream)
    assert total == 3 * N, total
    del result, tensor
    gc.collect()
    # The next result of that size: CuPy's pool would hand it the block TF may still be reading.
    after = cupy.zeros(N, cupy.float32)
    assert (cupy.asnumpy(after) == 0).all()
    dlpack.synchronize(cupy, 0)
    # Once the device was synchronised, the block goes back to the pool and is reused.
    del after
    gc.collect()
    again = cupy.zeros(N, cupy.float32)
    assert (cupy.asnumpy(again) == 0).all()
    reused = {again.data.ptr, cupy.zeros(N, cupy.float32).data.ptr}
    assert where in reused, "the block TF let go of never went back to the pool after the synchronize"


if __name__ == "__main__":
    run_cases(globals(), 0, 1)
