"""Run under mpirun with the fake CuPy (whose work runs deferred, in stream order) and
BLINKFLOW_BACKEND=cuda: every crossing back into TensorFlow must leave no work of ours pending.
TensorFlow reads the results on its own streams and may reuse the inputs' memory as soon as the
crossing returns, and nothing orders its streams after ours, so the crossing synchronises the
rank's GPU first. Checks eager and ``tf.function`` collectives (one and several tensors, and a
result slice whose alignment makes the crossing copy it), then that nothing is still queued.
Case script of the harness (tests/harness.py), run with other TF case scripts in one launch.
"""
import numpy as np
import tensorflow as tf  # before CuPy: the fake makes TF's DLPack speak CUDA when it finds TF loaded

from script_checks import check, close  # noqa: I100 (TF's threads set first)

import cupy  # noqa: E402
from cupy import _streams  # noqa: E402

import blinkflow.tensorflow as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402


def _defers():
    """Whether this fake CuPy runs work late, as the checks above assume."""
    x = cupy.ones(4, cupy.float32)
    stale = bool(np.isnan(np.asarray(x)).all())
    cupy.cuda.Device().synchronize()
    return stale and bool((np.asarray(x) == 1).all())


hvd.init()
n, r = hvd.size(), hvd.rank()
base = np.arange(10, dtype=np.float32)


def nothing_pending(label):
    check(f"{label}: no work still queued when TensorFlow got the results", not _streams._pending,
          [(q.ptr, q.issued - q.done) for q in _streams._pending])


def case_results_reach_tensorflow_only_after_our_streams_ran(rank, size):
    got = hvd.allreduce(tf.constant(base + r), op=hvd.Sum, name="eager")
    nothing_pending("eager allreduce")
    close("eager allreduce", got, sum(base + k for k in range(n)))

    # Three floats then ten: the second result starts 12 bytes into the fused buffer, unaligned for TF.
    a, b = hvd.grouped_allreduce([tf.constant(base[:3] + r), tf.constant(base * 2 + r)], op=hvd.Sum, name="pair")
    nothing_pending("eager grouped allreduce")
    close("eager grouped allreduce", a, sum(base[:3] + k for k in range(n)))
    close("eager grouped allreduce, unaligned slice", b, sum(base * 2 + k for k in range(n)))

    step = tf.function(lambda x: hvd.allreduce(x, op=hvd.Average, name="graph"))
    got = step(tf.constant(base * r))
    nothing_pending("tf.function allreduce")
    close("tf.function allreduce", got, base * (n - 1) / 2, base * n * (n - 1) / 2)

    got = hvd.broadcast(tf.constant(base + r), root_rank=n - 1, name="bcast")
    nothing_pending("eager broadcast")
    close("eager broadcast", got, base + n - 1)
    check("the fake defers (a copy is not done until synchronised)", _defers(), "")


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
