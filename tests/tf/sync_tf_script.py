"""Run under mpirun with the fake CuPy (whose work runs deferred, in stream order) and
BLINKFLOW_BACKEND=cuda: every crossing back into TensorFlow must leave no work of ours pending.
TensorFlow reads the results on its own streams and may reuse the inputs' memory as soon as the
crossing returns, and nothing orders its streams after ours, so the bridge synchronises the
rank's GPU first. Checks eager and ``tf.function`` collectives (one and several tensors, and a
result slice whose alignment makes the bridge copy it), then that nothing is still queued.
Prints ``TF SYNC OK``; exits 1 naming failures.
"""
import numpy as np
import tensorflow as tf  # before CuPy: the fake makes TF's DLPack speak CUDA when it finds TF loaded

import cupy  # noqa: E402
from cupy import _streams  # noqa: E402

import blinkflow.tensorflow as hvd
from script_checks import Checks



def _defers():
    """Whether this fake CuPy runs work late, as the checks above assume."""
    x = cupy.ones(4, cupy.float32)
    stale = bool(np.isnan(np.asarray(x)).all())
    cupy.cuda.Device().synchronize()
    return stale and bool((np.asarray(x) == 1).all())


hvd.init()
n, r = hvd.size(), hvd.rank()
checks = Checks(r)
base = np.arange(10, dtype=np.float32)


def nothing_pending(label):
    checks.check(f"{label}: no work still queued when TensorFlow got the results", not _streams._pending,
                 [(q.ptr, q.issued - q.done) for q in _streams._pending])


got = hvd.allreduce(tf.constant(base + r), op=hvd.Sum, name="eager")
nothing_pending("eager allreduce")
checks.close("eager allreduce", got, sum(base + k for k in range(n)))

# Three floats then ten: the second result starts 12 bytes into the fused buffer, unaligned for TF.
a, b = hvd.grouped_allreduce([tf.constant(base[:3] + r), tf.constant(base * 2 + r)], op=hvd.Sum, name="pair")
nothing_pending("eager grouped allreduce")
checks.close("eager grouped allreduce", a, sum(base[:3] + k for k in range(n)))
checks.close("eager grouped allreduce, unaligned slice", b, sum(base * 2 + k for k in range(n)))

step = tf.function(lambda x: hvd.allreduce(x, op=hvd.Average, name="graph"))
got = step(tf.constant(base * r))
nothing_pending("tf.function allreduce")
checks.close("tf.function allreduce", got, base * (n - 1) / 2)

got = hvd.broadcast(tf.constant(base + r), root_rank=n - 1, name="bcast")
nothing_pending("eager broadcast")
checks.close("eager broadcast", got, base + n - 1)
checks.check("the fake defers (a copy is not done until synchronised)", _defers(), "")
checks.report("TF SYNC OK")
