"""What the TensorFlow multi-process scripts share: checks that collect every failure instead of
stopping at the first (one launch costs seconds of TensorFlow import per rank), and running a
function eagerly or as a ``tf.function``."""
import sys

import numpy as np

from harness import done


class Checks:
    def __init__(self, rank: int):
        self.rank = rank
        self.failures = []
        self.count = 0

    def check(self, label, ok, detail=""):
        self.count += 1
        if not ok:
            self.failures.append(f"rank {self.rank}: {label} {detail}")

    def close(self, label, got, want, atol=1e-5):
        got, want = np.asarray(got), np.asarray(want)
        self.check(label, got.shape == want.shape and np.allclose(got, want, atol=atol), f"got {got!r} want {want!r}")

    def report(self, what: str) -> None:
        """Print every failure and exit 1, or how many checks of ``what`` held and the harness's
        completion marker."""
        if self.failures:
            print("\n".join(self.failures), flush=True)
            sys.exit(1)
        print(f"{what}: {self.count} checks held", flush=True)
        done(self.rank)


def run(fn, mode):
    import tensorflow as tf

    return tf.function(fn)() if mode == "function" else fn()
