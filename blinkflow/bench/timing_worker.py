"""One side of ``python -m blinkflow.bench separate``, run under mpirun as a plain script (by path,
so ``PYTHONPATH`` decides which blinkflow it times: this checkout, or an older one to compare).

``--side blinkflow`` times ``blinkflow.allreduce`` (out of place, as the API always is) and a
grouped all-reduce of 200 tensors of 16 KiB through the public API; ``--side mpi`` times
``MPI_Allreduce`` out of place, and one per tensor, in a process where blinkflow never started
(its background thread slows the MPI calls of the process it runs in). Prints one JSON object
on rank 0: per case the median, over repetitions, of the slowest rank's seconds.

It uses only what every blinkflow version since the first has (init, allreduce,
grouped_allreduce, shutdown), so one worker times every tree alike.
"""
import argparse
import json
import statistics
import time

import numpy as np

SMALL_TENSORS, SMALL_BYTES = 200, 16 * 1024


def reps_for(nbytes: int) -> int:
    return int(min(200, max(25, 2e9 // max(nbytes, 1) // 8)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=["blinkflow", "mpi"], required=True)
    parser.add_argument("--sizes", default="16777216,67108864", help="bytes, comma-separated")
    parser.add_argument("--small-reps", type=int, default=40, help="0: no 200 x 16 KiB case")
    parser.add_argument("--reps", type=int, default=0, help="repetitions per size (0: by size, 25-200)")
    args = parser.parse_args()
    if args.side == "blinkflow":
        import blinkflow as bf

        bf.init()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD

    def timed(fn) -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    out = {"side": args.side, "ranks": comm.Get_size(), "cases": {}}
    if args.side == "blinkflow":
        out["blinkflow"] = bf.__file__
    for nbytes in [int(s) for s in args.sizes.split(",") if s]:
        n = nbytes // 4
        src = np.random.default_rng(comm.Get_rank()).uniform(-1, 1, n).astype(np.float32)
        a, recv = np.empty(n, np.float32), np.empty(n, np.float32)
        if args.side == "blinkflow":
            call = lambda: bf.allreduce(a, op=bf.Sum, name="separate.allreduce")  # noqa: E731
        else:
            call = lambda: comm.Allreduce(a, recv, op=MPI.SUM)  # noqa: E731
        times = []
        for rep in range((args.reps or reps_for(nbytes)) + 1):
            a[...] = src  # the input equally warm in cache before every call
            seconds = timed(call)
            if rep:
                times.append(seconds)
        out["cases"][str(nbytes)] = statistics.median(times)
    if args.small_reps:
        tensors = [np.full(SMALL_BYTES // 4, i, np.float32) for i in range(SMALL_TENSORS)]
        outputs = [np.empty_like(t) for t in tensors]
        if args.side == "blinkflow":
            call = lambda: bf.grouped_allreduce(tensors, op=bf.Sum, name="separate.grouped")  # noqa: E731
        else:
            def call():
                for t, o in zip(tensors, outputs):
                    comm.Allreduce(t, o, op=MPI.SUM)
        times = [timed(call) for _ in range(args.small_reps + 1)][1:]
        out["cases"]["small"] = statistics.median(times)
    if args.side == "blinkflow":
        bf.shutdown()
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
