"""A mixed soak with one-rank faults (issue 18): every collective, named and unnamed, submitted
asynchronously in random batches; in random positions one random rank refuses a call (every kind
of bad argument the runtime refuses) or sends a different shape. Every result is checked against
numpy on every rank, every fault must raise the agreed error on every rank, and a step that
does not finish within a minute counts as a hang (the process dumps its threads and exits 1).

    PYTHONPATH=tests blinkrun -np 3 python tests/mpi/refusal_soak_script.py --seconds 180   # by hand (docs/reliability.md)
    mpirun -np 3 python tests/mpi/refusal_soak_script.py --seconds 20              # CI: test_refusals.py

Every rank draws the same calls from one seed (rank 0's, broadcast); inputs are functions of
(rank, step, call), so each rank computes what every other rank sent. Prints one line per rank:
``SOAK rank <r> steps=.. results=.. refused=.. mismatched=.. wrong=.. seconds=..``; exits 1 on
any wrong result or unexpected error.
"""
import argparse
import faulthandler
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from harness import close as within_rounding

OPS = [bf.Sum, bf.Average, bf.Min, bf.Max, bf.Product]
UFUNC = {bf.Sum: np.add, bf.Min: np.minimum, bf.Max: np.maximum, bf.Product: np.multiply}
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "float16"]
HANG_S = 60


def value(rank, seed, shape, dtype, small=False):
    """Rank ``rank``'s input for a call with ``seed``: small integers, exact in every dtype."""
    n = int(np.prod(shape))
    base = (np.arange(n, dtype=np.int64) * 7 + seed * 13 + rank * 5) % (2 if small else 9)
    if not small and np.dtype(dtype).kind in "if":
        base -= 4
    return (base + (1 if small else 0)).reshape(shape).astype(dtype)


def reduce_all(inputs, op, dtype):
    acc = inputs[0].astype(np.float64)
    for x in inputs[1:]:
        acc = UFUNC[op.combiner](acc, x.astype(np.float64))
    if op is bf.Average:
        acc = np.trunc(acc / len(inputs)) if np.dtype(dtype).kind in "iu" else acc / len(inputs)
    return acc


def summed(inputs):
    """The inputs' summed magnitudes, element by element (what a reduction's rounding scales with)."""
    return sum(np.abs(x.astype(np.float64)) for x in inputs)


def close(got, want, magnitude=0.0):
    """Whether ``got`` equals ``want`` within the rounding a reduction over the job's ranks can do
    (exactly for copies: ``magnitude`` 0)."""
    try:
        within_rounding(got, want, magnitude=magnitude, ranks=bf.size())
    except AssertionError:
        return False
    return True


class Soak:
    def __init__(self, seed):
        self.r, self.n = bf.rank(), bf.size()
        self.seed = seed
        self.stats = {"steps": 0, "results": 0, "refused": 0, "mismatched": 0, "wrong": 0}
        self.problems = []

    # ---- one call: (submit() -> handle, check(result) -> bool, expected error or None) ---------
    def call(self, rng, step, k):
        """Every rank draws the same call from ``rng`` (so no draw may depend on the rank);
        returns (submit, check, fault, culprit, name)."""
        n, r = self.n, self.r
        key = step * 100 + k
        name = None if rng.random() < 0.5 else f"soak.{step}.{k}"
        kind = rng.choice(["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
                           "grouped_broadcast", "reducescatter", "alltoall"])
        fault = rng.random()
        culprit = int(rng.integers(n))
        refuse = fault < 0.15
        mismatch = 0.15 <= fault < 0.2 and n > 1
        fault = "refuse" if refuse else "mismatch" if mismatch else None
        bad = self.refusal(kind, rng, n) if refuse else {}
        mine = r == culprit
        refused = refuse and mine
        dims = [int(d) for d in rng.integers(0, 5, size=int(rng.integers(1, 3)))]
        if rng.random() < 0.05:
            dims = [int(rng.integers(100_000, 600_000))]  # large: the single-copy / chunked paths
        shape = tuple(dims)

        if kind == "allreduce":
            op = OPS[int(rng.integers(len(OPS)))]
            dtype = DTYPES[int(rng.integers(len(DTYPES)))]
            if dtype == "uint8" and op is bf.Average:
                op = bf.Sum
            small = op is bf.Product or dtype == "uint8"
            xs = [value(q, key, shape, dtype, small) for q in range(n)]
            want, magnitude = reduce_all(xs, op, dtype), summed(xs)
            args = dict(op=op, name=name)
            if mismatch and mine:
                xs[r] = value(r, key, shape + (2,), dtype, small)
            if refused:
                args.update(bad)
            return (lambda: rt.allreduce_async(xs[r], **args)), \
                (lambda got: close(got, want, magnitude)), fault, \
                culprit, name
        if kind == "grouped_allreduce":
            op = [bf.Sum, bf.Average][int(rng.integers(2))]
            members = [(tuple(int(d) for d in rng.integers(0, 4, size=2)), DTYPES[int(rng.integers(4))])
                       for _ in range(int(rng.integers(1, 5)))]
            xs = [[value(q, key + i, s, d) for i, (s, d) in enumerate(members)] for q in range(n)]
            want = [reduce_all([xs[q][i] for q in range(n)], op, d) for i, (_, d) in enumerate(members)]
            magnitudes = [summed([xs[q][i] for q in range(n)]) for i in range(len(members))]
            args = dict(op=op, name=name)
            if mismatch and mine:
                xs[r] = xs[r][:-1] if len(xs[r]) > 1 else xs[r] + [np.ones(1)]
            if refused:
                args.update(bad)
            return (lambda: rt.grouped_allreduce_async(xs[r], **args)), \
                (lambda got: len(got) == len(want) and all(close(g, w, m) for g, w, m in
                                                           zip(got, want, magnitudes))), \
                fault, culprit, name
        if kind in ("allgather", "grouped_allgather"):
            count = 1 if kind == "allgather" else int(rng.integers(0, 4))
            tails = [tuple(int(d) for d in rng.integers(0, 3, size=int(rng.integers(0, 2)))) for _ in range(count)]
            dtypes = [DTYPES[int(rng.integers(len(DTYPES)))] for _ in range(count)]
            xs = [[value(q, key + i, ((q + step + i) % 3,) + tails[i], dtypes[i]) for i in range(count)]
                  for q in range(n)]
            want = [np.concatenate([xs[q][i] for q in range(n)]) for i in range(count)]
            if mismatch and mine:
                xs[r] = [value(r, key, (1,) + t + (2,), d) for t, d in zip(tails, dtypes)] or [np.ones((1, 2))]
            if kind == "allgather":
                submit = (lambda: rt.allgather_async(np.float32(1) if refused else xs[r][0], name=name))
                check = (lambda got: close(got, want[0]))
            else:
                submit = (lambda: rt.grouped_allgather_async(xs[r] + [np.float64(2)] if refused else xs[r],
                                                             name=name))
                check = (lambda got: len(got) == count and all(close(g, w) for g, w in zip(got, want)))
            return submit, check, fault, culprit, name
        if kind in ("broadcast", "grouped_broadcast"):
            root = int(rng.integers(n))
            count = 1 if kind == "broadcast" else int(rng.integers(1, 4))
            dtypes = [DTYPES[int(rng.integers(len(DTYPES)))] for _ in range(count)]
            xs = [[value(q, key + i, shape, dtypes[i]) for i in range(count)] for q in range(n)]
            sent = xs[root]
            bad_root = n + 1 if rng.random() < 0.5 else 0.5  # drawn on every rank: the draws stay in step
            root_arg = bad_root if refused else root
            if mismatch and mine:
                xs[r] = [np.ones(shape + (3,), d) for d in dtypes]
            if kind == "broadcast":
                submit = (lambda: rt.broadcast_async(xs[r][0], root_arg, name=name))
                check = (lambda got: close(got, sent[0]))
            else:
                submit = (lambda: rt.grouped_broadcast_async(xs[r], root_arg, name=name))
                check = (lambda got: len(got) == count and all(close(g, sent[i]) for i, g in enumerate(got)))
            return submit, check, fault, culprit, name
        if kind == "reducescatter":
            op = [bf.Sum, bf.Average, bf.Min, bf.Max][int(rng.integers(4))]
            dtype = DTYPES[int(rng.integers(4))]
            rows = int(rng.integers(0, 3 * n + 2))
            tail = tuple(int(d) for d in rng.integers(1, 3, size=int(rng.integers(0, 2))))
            xs = [value(q, key, (rows,) + tail, dtype) for q in range(n)]
            full, magnitude = reduce_all(xs, op, dtype), summed(xs)
            args = dict(op=op, name=name)
            if mismatch and mine:
                xs[r] = value(r, key, (rows + 1,) + tail, dtype)
            if refused:
                args.update(bad)
            counts = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
            start = sum(counts[:r])
            return (lambda: rt.reducescatter_async(xs[r], **args)), \
                (lambda got: close(got, full[start:start + counts[r]], magnitude[start:start + counts[r]])), \
                fault, culprit, name
        # alltoall: rank q sends (q + j + step) % 3 rows to rank j
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        sends = [[(q + j + step) % 3 for j in range(n)] for q in range(n)]
        xs = [value(q, key, (sum(sends[q]), 2), dtype) for q in range(n)]
        offsets = [np.cumsum([0] + s) for s in sends]
        want = np.concatenate([xs[q][offsets[q][r]:offsets[q][r] + sends[q][r]] for q in range(n)])
        splits = sends[r]
        if refused:
            splits = bad["splits"]
        if mismatch and mine:
            xs[r] = value(r, key, (sum(sends[r]), 3), dtype)
        return (lambda: rt.alltoall_async(xs[r], splits=splits, name=name)), \
            (lambda got: close(got[0], want) and list(got[1]) == [sends[q][r] for q in range(n)]), \
            fault, culprit, name

    def refusal(self, kind, rng, n):
        """Bad arguments the runtime refuses, for ``kind`` (keyword arguments replacing good ones)."""
        options = {
            "allreduce": [dict(op="median"), dict(prescale_factor=float("nan")), dict(postscale_factor="x"),
                          dict(op=99)],
            "grouped_allreduce": [dict(op="median"), dict(prescale_factor=float("inf"))],
            "reducescatter": [dict(op="median"), dict(op=-3)],
            "alltoall": [dict(splits=[1.5] * n), dict(splits=[-1] + [1] * (n - 1)), dict(splits=[0] * (n + 1))],
        }.get(kind, [dict()])  # the others: 0-d tensors, roots out of range (built in call())
        return options[int(rng.integers(len(options)))]

    # ---- the loop ---------------------------------------------------------------------------
    def step(self, step):
        rng = np.random.default_rng([self.seed, step])
        calls = [self.call(rng, step, k) for k in range(int(rng.integers(1, 7)))]
        handles = [(submit(), check, fault, culprit, name) for submit, check, fault, culprit, name in calls]
        order = np.random.default_rng([self.seed, step, self.r]).permutation(len(handles))  # per rank
        for i in order:
            handle, check, fault, culprit, name = handles[i]
            self.finish(handle, check, fault, culprit, name, step)
        self.stats["steps"] += 1

    def finish(self, handle, check, fault, culprit, name, step):
        try:
            got = rt.synchronize(handle)
        except bf.InvalidArgumentError as e:
            ok = fault == "refuse" and f"refused by rank {culprit}: " in str(e) and (name is None or name in str(e))
            self.stats["refused"] += 1
            if not ok:
                self.problem(step, f"unexpected refusal (fault {fault} by rank {culprit}): {e}")
            return
        except bf.TensorMismatchError as e:
            self.stats["mismatched"] += 1
            if fault != "mismatch" or f"rank {culprit}" not in str(e):
                self.problem(step, f"unexpected mismatch (fault {fault} by rank {culprit}): {e}")
            return
        if fault is not None:
            self.problem(step, f"a {fault} by rank {culprit} returned a result")
            return
        self.stats["results"] += 1
        if not check(got):
            self.stats["wrong"] += 1
            self.problem(step, f"wrong result for {name or 'an unnamed call'}")

    def problem(self, step, text):
        self.problems.append(f"step {step}: {text}")
        print(f"SOAK PROBLEM rank {self.r} step {step}: {text}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=None, help="default: chosen by rank 0 from the clock")
    args = parser.parse_args()
    bf.init()
    seed = bf.broadcast_object(args.seed if args.seed is not None else int(time.time()) % 100000, 0)
    soak = Soak(seed)
    began = time.monotonic()
    step = 0
    while True:
        # Every rank stops after the same step: rank 0's clock decides, every 20 steps.
        if step % 20 == 0:
            go_on = bf.broadcast_object(time.monotonic() - began < args.seconds, 0, name=f"soak.clock.{step}")
            if not go_on:
                break
        faulthandler.dump_traceback_later(HANG_S, exit=True)  # a hang: every thread's stack, exit 1
        soak.step(step)
        faulthandler.cancel_dump_traceback_later()
        step += 1
    s = soak.stats
    print(f"SOAK rank {soak.r} seed={seed} steps={s['steps']} results={s['results']} refused={s['refused']} "
          f"mismatched={s['mismatched']} wrong={s['wrong']} problems={len(soak.problems)} "
          f"seconds={time.monotonic() - began:.0f}", flush=True)
    bf.shutdown()
    sys.exit(1 if soak.problems else 0)


if __name__ == "__main__":
    main()
