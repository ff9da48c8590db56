"""One rank of the two-host runtime test (test_runtime_two_hosts.py), run on bfa and bfb.

Real host names group the ranks (no ``BLINKFLOW_SPLIT_HOSTS``), so all-reduce runs Blink's
three-phase protocol with its cross-host phase over TCP between the namespaces. Every rank can
compute every rank's input, checks its results against numpy and prints one
``DIGEST <case> <rank> <sha256>`` line per result, so the test can also see that all ranks hold
the same bytes (exact equality, not just closeness, is what keeps replicas in step).
"""
import hashlib

import numpy as np

import blinkflow as bf
from blinkflow.config import get_config
from blinkflow.runtime import api as rt

ELEMENTS = 100_000 + 3   # many pipeline chunks at the test's 64 KiB, not a multiple of any shard count


def value(r, dtype, n=ELEMENTS):
    """Rank r's input: random floats (so summation order shows in the bits) or small integers."""
    rng = np.random.default_rng(1000 + r)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-1000, 1000, n).astype(dtype)


def report(case, array):
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    print(f"DIGEST {case} {bf.rank()} {digest}", flush=True)


def main():
    bf.init()
    r, n = bf.rank(), bf.size()
    job = rt.RUNTIME.engine.job
    print(f"LAYOUT {r} {n} {bf.local_rank()} {bf.local_size()} {bf.cross_rank()} {bf.cross_size()} "
          f"{','.join(job.hosts)} {job.plans.get('allreduce').is_three_phase} {get_config().chunk_bytes}", flush=True)

    for dtype in ("float32", "float64", "int64"):
        inputs = [value(q, dtype) for q in range(n)]
        for op in (bf.Sum, bf.Average, bf.Max):
            got = bf.allreduce(inputs[r], op=op, name=f"ar.{dtype}.{op.name}")
            stacked = np.stack(inputs).astype(np.float64)
            want = {bf.Sum: stacked.sum(0), bf.Average: stacked.sum(0) * (1.0 / n), bf.Max: stacked.max(0)}[op]
            assert got.dtype == np.dtype(dtype) and got.shape == (ELEMENTS,)
            if dtype == "int64":   # exact; an integer Average truncates toward zero (Horovod's rule)
                assert np.array_equal(got, np.trunc(want).astype(dtype)), f"allreduce {dtype} {op.name}"
            else:
                bad = ~np.isclose(got, want, rtol=1e-4, atol=1e-4)
                assert not bad.any(), (f"allreduce {dtype} {op.name} rank {r}: {bad.sum()} wrong, first at "
                                       f"{np.flatnonzero(bad)[:3]} got {got[bad][:3]} want {want[bad][:3]}")
            report(f"allreduce.{dtype}.{op.name}", got)

    # rank q sends q + 1 rows: uneven first dimensions across both hosts
    rows = [value(q, "float32", (q + 1) * 1000).reshape(q + 1, 1000) for q in range(n)]
    got = bf.allgather(rows[r], name="ag")
    assert np.array_equal(got, np.concatenate(rows)), "allgather"
    report("allgather", got)

    for root in range(n):   # roots on both hosts
        got = bf.broadcast(value(r, "float32"), root_rank=root, name=f"bc.{root}")
        assert np.array_equal(got, value(root, "float32")), f"broadcast from {root}"
        report(f"broadcast.{root}", got)

    bf.shutdown()
    print(f"DONE {r}", flush=True)


if __name__ == "__main__":
    main()
