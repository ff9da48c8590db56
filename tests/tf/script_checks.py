"""What the multi-process TF scripts share: named checks collected per rank, and the verdict.

``checks = Checks(rank)``; ``checks.check(label, ok, detail)``, ``checks.close(label, got, want)``;
``checks.finish("BUCKETS OK")`` prints every failure and exits 1, or prints ``BUCKETS OK <count>``.
"""
import sys

import numpy as np


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

    def finish(self, ok_line: str) -> None:
        if self.failures:
            print("\n".join(self.failures), flush=True)
            sys.exit(1)
        print(f"{ok_line} {self.count}", flush=True)
