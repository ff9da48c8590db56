"""Run under mpirun (2 or 3 ranks): what one rank alone gets wrong in the TensorFlow API (issue
18, findings 1-3) reaches every rank as one error, eagerly and inside tf.function, and the next
collectives, unnamed and named, return the right values. Before the fix the refusing rank
raised alone: eagerly its unnamed names slipped (later calls paired with the others' earlier
ones), in a graph its trace failed while the others waited forever.

Prints the test harness's completion marker; exits 1 naming every failed check.
"""

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import blinkflow as bf  # noqa: E402
import blinkflow.tensorflow as hvd  # noqa: E402
from script_checks import Checks, run  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
bad = n - 1
checks = Checks(r)
check, close = checks.check, checks.close



x = tf.constant(np.full((n, 2), r + 1.0, np.float32))
mine = bad == r
cases = [  # (label, call on every rank (the bad rank's arguments differ), error class, hint)
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

for mode in ("eager", "function"):
    for label, call, kind, hint in cases:
        expected = ERRORS[mode][kind]
        try:
            run(call, mode)
            check(f"{mode} {label} raises", False, "no error")
        except expected as error:
            text = str(error)
            check(f"{mode} {label} names the rank", f"rank {bad}" in text and hint in text, text[:400])
        except Exception as error:  # noqa: BLE001 - any other type is the failure being tested
            check(f"{mode} {label} type", False, f"{type(error).__name__}: {str(error)[:300]}")
        # Unnamed then named: a slipped automatic name pairs rank values that differ.
        y = run(lambda: hvd.allreduce(tf.constant([float(r + 1)]), op=bf.Sum), mode)
        check(f"{mode} {label} next unnamed", np.allclose(y, [n * (n + 1) / 2]), y)
        y = run(lambda: hvd.allreduce(tf.constant([float(r + 1)]), op=bf.Sum, name=f"after.{mode}.{label}"), mode)
        check(f"{mode} {label} next named", np.allclose(y, [n * (n + 1) / 2]), y)

checks.report("refusals")
