"""The autotuner under mpirun: settings change while all-reduces of many sizes run, results stay
right, and every rank ends fusing alike. Run by test_autotune.py with BLINKFLOW_AUTOTUNE=1 and
short samples."""
import os
import sys

import numpy as np

import blinkflow as bf
from blinkflow.runtime.global_state import RUNTIME
from harness import close, run_cases

SIZES = [1, 1000, 70_000, 300_000]


def global_executor():
    return RUNTIME.engine.loop.executor


def case_results_stay_right_while_the_settings_change(rank, size):
    seen = set()
    for step in range(120):
        handles = [bf.allreduce_async(np.full(n, rank + step % 7, np.float32), name=f"g{k}", op=bf.Sum)
                   for k, n in enumerate(SIZES)]
        for n, handle in zip(SIZES, handles):
            want = sum(r + step % 7 for r in range(size))
            close(bf.synchronize(handle), np.full(n, want, np.float32), what=f"step {step} size {n}")
        seen.add(global_executor().fusion_threshold)
    assert len(seen) > 1, f"the fusion threshold never changed: {seen}"


def case_every_rank_applied_the_same_settings(rank, size):
    mine = np.array([global_executor().fusion_threshold], np.int64)
    every = bf.allgather(mine, name="fusion_thresholds")
    assert len(set(every.tolist())) == 1, f"ranks fuse with different thresholds: {every.tolist()}"


def case_rank_zero_logged_every_sample(rank, size):
    log = os.environ["BLINKFLOW_AUTOTUNE_LOG_FILE"]
    if rank == 0:
        rows = open(log).read().splitlines()[1:]
        phases = [row.split(",")[1] for row in rows]
        assert phases[:1] == ["warmup"] and phases.count("sample") == 6 and phases[-1] == "best", phases
        kept = int(rows[-1].split(",")[2])
        assert global_executor().fusion_threshold == kept
    bf.barrier()


def main():
    bf.init()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    bf.shutdown()


if __name__ == "__main__":
    main()
