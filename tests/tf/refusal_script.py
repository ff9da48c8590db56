"""What one rank alone gets wrong in the TensorFlow API reaches every rank as one error, eagerly
and inside tf.function, and the next collectives, unnamed and named, return the right values: a
refusing rank that raised alone would let its unnamed names slip (later calls pairing with the
others' earlier ones), and in a graph its trace would fail while the others waited forever.
Case script of the harness (tests/harness.py), run with other TF case scripts in one launch.
"""
import numpy as np
import tensorflow as tf

from script_checks import check, close, run  # noqa: I100 (TF's threads set first)

import blinkflow as bf  # noqa: E402
import blinkflow.tensorflow as hvd  # noqa: E402
from harness import job_rank_size, run_cases  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
bad = n - 1
x = tf.constant(np.full((n, 2), r + 1.0, np.float32))
mine = bad == r
CALLS = [  # (label, call on every rank (the bad rank's arguments differ), error class, hint)
    ("op", lambda: hvd.allreduce(x, op="median" if mine else bf.Sum), "InvalidArgument", "unknown reduce op"),
    ("scale", lambda: hvd.allreduce(x, prescale_factor="x" if mine else 1.0), "InvalidArgument",
     "prescale_factor must be a finite number"),
    ("dtype", lambda: hvd.allreduce(tf.complex(x, x) if mine else x), "InvalidArgument", "dtype complex64"),
    ("splits", lambda: hvd.alltoall(x, splits=[1.5] + [1] * (n - 2) + [0.5] if mine else [1] * n)[0],
     "InvalidArgument", "splits must be integers"),
    ("rsop", lambda: hvd.reducescatter(x, op=-1 if mine else bf.Sum), "InvalidArgument", "unknown reduce op -1"),
    ("empty.group", lambda: hvd.grouped_allreduce([] if mine else [x]), "Mismatch", "group members"),
    ("gather.count", lambda: hvd.grouped_allgather([x] if mine else [x, x]), "Mismatch", "group members"),
    ("bcast.count", lambda: hvd.grouped_broadcast([x] if mine else [x, x], 0), "Mismatch", "group members"),
    ("bcast.root", lambda: hvd.broadcast(x, n if mine else 0), "InvalidArgument", f"root_rank {n} is not a rank"),
]
ERRORS = {"eager": {"InvalidArgument": bf.InvalidArgumentError, "Mismatch": bf.TensorMismatchError},
          "function": {"InvalidArgument": tf.errors.InvalidArgumentError,
                       "Mismatch": tf.errors.FailedPreconditionError}}



def refused_everywhere(mode):
    """Each call the bad rank makes differently fails on every rank naming it, and the next
    unnamed and named collectives pair correctly."""
    for label, call, kind, hint in CALLS:
        expected = ERRORS[mode][kind]
        try:
            run(call, mode)
            raised = None
        except Exception as error:  # noqa: BLE001 - the type is what is checked
            raised = error
        check(f"{mode} {label} raises {expected.__name__}", isinstance(raised, expected),
              f"{type(raised).__name__}: {str(raised)[:300]}")
        check(f"{mode} {label} names the rank", f"rank {bad}" in str(raised) and hint in str(raised), str(raised)[:400])
        # Unnamed then named: a slipped automatic name pairs rank values that differ.
        y = run(lambda: hvd.allreduce(tf.constant([float(r + 1)]), op=bf.Sum), mode)
        close(f"{mode} {label} next unnamed", y, [n * (n + 1) / 2])
        y = run(lambda: hvd.allreduce(tf.constant([float(r + 1)]), op=bf.Sum, name=f"after.{mode}.{label}"), mode)
        close(f"{mode} {label} next named", y, [n * (n + 1) / 2])


def case_refused_eagerly_on_every_rank(rank, size):
    refused_everywhere("eager")


def case_refused_in_a_tf_function_on_every_rank(rank, size):
    refused_everywhere("function")


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size())
