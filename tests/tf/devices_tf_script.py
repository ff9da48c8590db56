"""Run under mpirun with the fake CuPy and BLINKFLOW_BACKEND=cuda: TF tensors on one GPU per
rank cross into the cuda backend and back.

``ids``: Horovod's recipe, ``tf.config.set_visible_devices(gpus[local_rank])``, under which TF
labels rank k's tensors GPU 0 while they live on GPU k (FAKE_CUPY_TF_SEES_ONE=1): eager and
``tf.function`` collectives must come back right. ``residency``: inside a ``tf.function`` the
crossing op must be one TensorFlow can keep on the GPU: ``EagerPyFunc`` has GPU kernels only when
no input or output is int32 or string, and otherwise the whole op runs on the CPU, every GPU
tensor copied down and back. Prints ``TF DEVICES OK <mode> <checks>``; exits 1 naming failures.
"""
import sys

import numpy as np
import tensorflow as tf

import blinkflow.tensorflow as hvd
from script_checks import Checks

mode = sys.argv[1]
hvd.init()
n, r = hvd.size(), hvd.rank()
checks = Checks(r)
gpus = tf.config.list_physical_devices("GPU")
if gpus:  # Horovod's recipe (no GPU for TensorFlow on this machine: the fake plays it)
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
base = np.arange(10, dtype=np.float32)
want = sum(base + k for k in range(n))


def step(x, y):
    return hvd.grouped_allreduce([x, y], op=hvd.Sum, name="step")


if mode == "ids":
    got = hvd.allreduce(tf.constant(base + r), op=hvd.Sum, name="eager")
    checks.close("eager allreduce", got, want)
    got = hvd.broadcast(tf.constant(base + r), root_rank=n - 1, name="bcast")
    checks.close("eager broadcast", got, base + n - 1)
    x, y = tf.function(step)(tf.constant(base + r), tf.constant(base[:3] * r))
    checks.close("tf.function allreduce", x, want)
    checks.close("tf.function allreduce 2", y, sum(base[:3] * k for k in range(n)))
elif mode == "residency":
    graph = tf.function(step).get_concrete_function(tf.TensorSpec([10], tf.float32),
                                                    tf.TensorSpec([3], tf.float32)).graph
    crossings = [op for op in graph.get_operations() if op.type in ("EagerPyFunc", "PyFunc")]
    checks.check("the step crosses in one EagerPyFunc", [op.type for op in crossings] == ["EagerPyFunc"],
                 [op.type for op in crossings])
    for op in crossings:
        dtypes = [tf.as_dtype(d) for d in list(op.get_attr("Tin")) + list(op.get_attr("Tout"))]
        host_only = [d.name for d in dtypes if d in (tf.int32, tf.string)]
        checks.check(f"{op.name} has no int32 or string input or output (they pin it to the CPU)",
                     not host_only, host_only)
    x, y = tf.function(step)(tf.constant(base + r), tf.constant(base[:3] * r))
    checks.close("tf.function allreduce", x, want)
    failed = None
    try:
        tf.function(lambda: hvd.allreduce(tf.ones([2 + r]), name="mismatch"))()
    except tf.errors.FailedPreconditionError as e:
        failed = str(e)
    checks.check("a mismatch inside tf.function still fails with its code and message",
                 n == 1 or (failed is not None and "mismatch" in failed), failed)
checks.report(f"TF DEVICES OK {mode}")
