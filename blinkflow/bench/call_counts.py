"""Python and C calls per all-reduce, in every thread: the per-call cost of the runtime counted
rather than timed, so two trees compare on a loaded machine where wall-clock medians are noise.

Run under mpirun as a plain script (by path, so ``PYTHONPATH`` decides which blinkflow it counts,
as :mod:`.timing_worker`)::

    PYTHONPATH=<tree> mpirun -np 2 python blinkflow/bench/call_counts.py --case 1MiB

``--case`` is a size (one float32 ``blinkflow.allreduce``) or ``small`` (a ``grouped_allreduce``
of 200 tensors of 16 KiB). A profile hook set before ``init`` (so the background thread has it
too) counts calls of ``--reps`` calls after five warm-up ones; the calls of a rank's waiting
loops are left out of the totals (their number depends on which rank arrives first). Prints,
on rank 0, one JSON object: per rank the Python and C calls per all-reduce, and the most
frequent functions. It uses only init, allreduce, grouped_allreduce and shutdown, so it counts
every tree alike.
"""
import argparse
import collections
import json
import sys
import threading

import numpy as np

#: Functions of the waiting loops (polling a peer's progress), left out of the totals.
WAITING = ("mailbox.py:poll", "wire.py:poll", "wire.py:<listcomp>", "quiet_wait.py:until", "transport.py:poll",
           "transport.py:wait", "wire.py:wait", "<c>:perf_counter", "<c>:sched_yield", "<c>:len",
           "<c>:Struct.unpack_from", "<c>:list.append")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", default="1MiB", help="a size with a unit (KiB, MiB) or 'small'")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    counting = [False]
    counts: collections.Counter = collections.Counter()

    def hook(frame, event, arg):
        if not counting[0]:
            return
        if event == "call":
            code = frame.f_code
            counts[f"{code.co_filename.rsplit('blinkflow/', 1)[-1]}:{code.co_name}"] += 1
        elif event == "c_call":
            counts[f"<c>:{getattr(arg, '__qualname__', arg)}"] += 1

    threading.setprofile(hook)
    import blinkflow as bf
    from mpi4py import MPI

    bf.init()
    comm = MPI.COMM_WORLD
    if args.case == "small":
        tensors = [np.full(4096, i, np.float32) for i in range(200)]
        call = lambda: bf.grouped_allreduce(tensors, op=bf.Sum, name="call_counts.grouped")  # noqa: E731
    else:
        units = {"KiB": 1 << 10, "MiB": 1 << 20}
        number, unit = args.case[:-3], args.case[-3:]
        tensor = np.ones(int(float(number) * units[unit]) // 4, np.float32)
        call = lambda: bf.allreduce(tensor, op=bf.Sum, name="call_counts.allreduce")  # noqa: E731
    for _ in range(5):
        call()
    comm.Barrier()
    sys.setprofile(hook)
    counting[0] = True
    for _ in range(args.reps):
        call()
    counting[0] = False
    sys.setprofile(None)
    comm.Barrier()
    bf.shutdown()
    kept = {k: v / args.reps for k, v in counts.items() if not k.endswith(WAITING)}
    mine = {"python": sum(v for k, v in kept.items() if not k.startswith("<c>")),
            "c": sum(v for k, v in kept.items() if k.startswith("<c>")),
            "top": sorted(kept.items(), key=lambda kv: -kv[1])[:args.top]}
    every = comm.gather(mine)
    if comm.Get_rank() == 0:
        print(json.dumps({"case": args.case, "ranks": comm.Get_size(), "blinkflow": bf.__file__,
                          "per_rank": every}), flush=True)


if __name__ == "__main__":
    main()
