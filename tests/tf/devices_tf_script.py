"""Run with the fake CuPy, a GPU per rank, and BLINKFLOW_BACKEND=cuda: TF tensors on one GPU per
rank cross into the cuda backend and back.

Horovod's recipe, ``tf.config.set_visible_devices(gpus[local_rank])``, under which TF labels rank
k's tensors GPU 0 while they live on GPU k (FAKE_CUPY_TF_SEES_ONE=1): eager and ``tf.function``
collectives must come back right. Inside a ``tf.function`` the crossing op must be one TensorFlow
can keep on the GPU: ``EagerPyFunc`` has GPU kernels only when no input or output is int32 or
string, and otherwise the whole op runs on the CPU, every GPU tensor copied down and back.
Case script of the harness (tests/harness.py); a launch runs one case or the other
(tests/tf/tf_jobs.py: the settings differ).
"""
import numpy as np
import tensorflow as tf

from script_checks import check, close  # noqa: I100 (TF's threads set first)

import blinkflow.tensorflow as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
n, r = hvd.size(), hvd.rank()
gpus = tf.config.list_physical_devices("GPU")
if gpus:  # Horovod's recipe (no GPU for TensorFlow on this machine: the fake plays it)
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
base = np.arange(10, dtype=np.float32)
want = sum(base + k for k in range(n))


def step(x, y):
    return hvd.grouped_allreduce([x, y], op=hvd.Sum, name="step")


def case_ids_follow_the_memory_under_set_visible_devices(rank, size):
    """TF says GPU 0 for every rank's tensors; rank 1's live on GPU 1 (no peer access to GPU 0)."""
    got = hvd.allreduce(tf.constant(base + r), op=hvd.Sum, name="eager")
    close("eager allreduce", got, want)
    got = hvd.broadcast(tf.constant(base + r), root_rank=n - 1, name="bcast")
    close("eager broadcast", got, base + n - 1)
    x, y = tf.function(step)(tf.constant(base + r), tf.constant(base[:3] * r))
    close("tf.function allreduce", x, want)
    close("tf.function allreduce 2", y, sum(base[:3] * k for k in range(n)))


def case_the_crossing_inside_tf_function_stays_on_the_gpu(rank, size):
    graph = tf.function(step).get_concrete_function(tf.TensorSpec([10], tf.float32),
                                                    tf.TensorSpec([3], tf.float32)).graph
    crossings = [op for op in graph.get_operations() if op.type in ("EagerPyFunc", "PyFunc")]
    check("the step crosses in one EagerPyFunc", [op.type for op in crossings] == ["EagerPyFunc"],
          [op.type for op in crossings])
    for op in crossings:
        dtypes = [tf.as_dtype(d) for d in list(op.get_attr("Tin")) + list(op.get_attr("Tout"))]
        host_only = [d.name for d in dtypes if d in (tf.int32, tf.string)]
        check(f"{op.name} has no int32 or string input or output (they pin it to the CPU)", not host_only, host_only)
    x, y = tf.function(step)(tf.constant(base + r), tf.constant(base[:3] * r))
    close("tf.function allreduce", x, want)
    failed = None
    try:
        tf.function(lambda: hvd.allreduce(tf.ones([2 + r]), name="mismatch"))()
    except tf.errors.FailedPreconditionError as e:
        failed = str(e)
    check("a mismatch inside tf.function still fails with its code and message",
          n == 1 or (failed is not None and "mismatch" in failed), failed)


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
