"""What the TensorFlow case scripts share: TensorFlow's thread settings, made once per process
before any op runs (several scripts share one process: tests/harness.py ``run_scripts``); checks
that raise; the one float rule with the job's size; running a function eagerly or as a
``tf.function``; and the route the TF tensors took into the runtime."""
import os

import numpy as np
import tensorflow as tf

import harness

#: The environment variable by which a job asks for more inter-op threads (tests/tf/tf_jobs.py).
INTER_OP_THREADS = "TESTS_TF_INTER_OP_THREADS"
# One intra- and one inter-op thread: ranks share two cores, and the gradient buckets must not
# deadlock with a single inter-op thread (buckets_script.py). A job may ask for more.
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(int(os.environ.get(INTER_OP_THREADS, "1")))

MODES = ("eager", "function")
RANK, SIZE = harness.job_rank_size()


def check(label, ok, detail=""):
    if not ok:
        raise AssertionError(f"{label}: {detail}")


def close(label, got, want, magnitude=0.0, ranks=None, rounding=None):
    """:func:`harness.close` on a TF or numpy result: within the rounding of a reduction over
    ``ranks`` (the job's size) inputs of summed magnitude ``magnitude`` (0: exactly)."""
    harness.close(np.asarray(got), np.asarray(want, np.float64) if np.asarray(want).dtype.kind == "f" else want,
                  magnitude, SIZE if ranks is None else ranks, rounding, what=label)


def run(fn, mode):
    return tf.function(fn)() if mode == "function" else fn()


class Route:
    """How many tensors crossed into the runtime by the host and by DLPack since it was made."""

    def __init__(self):
        from blinkflow.tensorflow.crossing import arrays

        self._counts = arrays.conversions
        self._start = dict(self._counts)

    def crossed(self):
        return {k: self._counts[k] - self._start.get(k, 0) for k in self._counts}

    def expect(self, at_least):
        """Every tensor since went the route the job's backend gives TF tensors: DLPack into the
        cuda backend (BLINKFLOW_BACKEND=cuda, the fake CuPy here), else through the host; at
        least ``at_least`` of them."""
        from blinkflow.config import get_config

        crossed = self.crossed()
        route, other = ("device", "host") if get_config().backend == "cuda" else ("host", "device")
        check(f"no tensor went by the {other} route", crossed.get(other, 0) == 0, crossed)
        check(f"tensors went by the {route} route", crossed.get(route, 0) >= at_least, crossed)
        return route


def close_trained(label, got, want, steps, rounding="float32"):
    """Weights (or losses) after ``steps`` steps of training against the same training done
    another way (one process on the concatenated batches, without XLA, ...), array by array:
    each step's update is a reduction in ``rounding`` (the models train in float32) whose
    rounding the one rule bounds, of values no larger than the weights plus one (these small
    models' inputs, gradients and learning rates are of order one), and the steps' bounds add up."""
    check(f"{label}: as many arrays", len(got) == len(want), f"{len(got)} vs {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        close(f"{label} (array {i})", g, w, steps * (np.abs(np.asarray(w, np.float64)) + 1.0), rounding=rounding)


def same_on_all_ranks(label, values):
    """Every rank holds the same arrays, bit for bit."""
    import blinkflow as bf

    values = [np.asarray(v) for v in values]
    everyone = bf.allgather_object(values)
    check(label, all(len(o) == len(values) and all(np.array_equal(a, b) for a, b in zip(o, values))
                     for o in everyone), "differs between ranks")
