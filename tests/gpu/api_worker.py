"""Run under mpirun: the public API (``bf.init``, ``bf.allreduce`` ...) on cupy arrays, end to end
(runtime, negotiation, fusion, the schedule runner, the cuda transport), ranks sharing the GPU.

Run by ``tests/gpu/test_api_gpu.py`` on a real GPU and by ``tests/mpi/test_api_fake_cupy.py``
under the fake CuPy. Every rank derives every rank's input from a seed, so each checks its
result against a float64 numpy reference itself; results must also be bitwise identical across
ranks (digests compared). Prints ``API OK <ranks> ranks <checks>``; exits 1 naming each failure.
"""
import hashlib
import os
import sys

import cupy
import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tf"))
from script_checks import Checks  # noqa: E402  (tests/tf/script_checks.py: no TensorFlow needed)

bf.init()
n, r = bf.size(), bf.rank()
checks = Checks(r)
check = checks.check
digests = []

# Odd sizes on purpose: shards and chunks that do not divide evenly; 1<<20 + 3 spans chunks.
SIZES = (1, 1000, (1 << 20) + 3)
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "int32": 0.0}
"""Machine epsilon: a reduction rounds each of its at most ``n`` partial results (and a scaled
result once more) to the dtype, each time by at most eps/2 of a value no larger than the sum of
the inputs' magnitudes."""


def inputs(rank: int, nelems: int, dtype: str, salt: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + salt)
    if dtype == "int32":
        return rng.integers(-1000, 1000, nelems).astype(np.int32)
    return rng.standard_normal(nelems).astype(dtype)


def agree(label: str, got) -> None:
    """Remember the digest of ``got`` for the check that every rank holds the same bytes."""
    digests.append((label, hashlib.sha1(cupy.asnumpy(got).tobytes()).hexdigest()))


def summed(parts):
    """The exact sum of ``parts`` (float64) and the sum of their magnitudes, element by element."""
    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    return sum(parts), sum(np.abs(p) for p in parts)


def close(label: str, got, want: np.ndarray, dtype: str, magnitude=0.0, same_everywhere=True) -> None:
    """``got`` equals ``want`` within the rounding a reduction of inputs of total ``magnitude``
    may do (0: exactly, as a copy must); ``same_everywhere``: every rank got these bytes."""
    check(f"{label} is a cupy array", isinstance(got, cupy.ndarray), type(got))
    host = cupy.asnumpy(got)
    ok = host.shape == want.shape and host.dtype == np.dtype(dtype)
    if ok:
        err = np.abs(host.astype(np.float64) - want)
        ok = bool(np.all(err <= EPS[dtype] * (n + 1) * magnitude))
    check(label, ok, f"shape {host.shape} dtype {host.dtype}, max error "
          f"{np.max(np.abs(host.astype(np.float64) - want)) if host.shape == want.shape else 'n/a'}")
    if same_everywhere:
        agree(label, got)


salt = 0
for dtype in ("float32", "float16", "int32"):
    for nelems in SIZES:
        salt += 1
        mine = cupy.asarray(inputs(r, nelems, dtype, salt))
        want, magnitude = summed(inputs(q, nelems, dtype, salt) for q in range(n))
        close(f"allreduce sum {dtype} {nelems}", bf.allreduce(mine, op=bf.Sum, name=f"sum.{dtype}.{nelems}"),
              want, dtype, magnitude)
        check(f"allreduce {dtype} {nelems} leaves its input alone",
              np.array_equal(cupy.asnumpy(mine), inputs(r, nelems, dtype, salt)))
        if dtype != "int32":
            close(f"allreduce average {dtype} {nelems}",
                  bf.allreduce(mine, op=bf.Average, name=f"avg.{dtype}.{nelems}"), want / n, dtype, magnitude)

# A buffer large enough for bigger automatic chunks (64 MiB), then a small one again.
for nelems in ((16 << 20) + 5, 1000):
    salt += 1
    mine = cupy.asarray(inputs(r, nelems, "float32", salt))
    want, magnitude = summed(inputs(q, nelems, "float32", salt) for q in range(n))
    close(f"allreduce sum float32 {nelems} after growth", bf.allreduce(mine, op=bf.Sum, name=f"big.{nelems}"),
          want, "float32", magnitude)
    if n > 1 and nelems > 1000:  # the case covers what it says: the policy's larger chunks ran
        be = rt.RUNTIME.engine._backends["cuda"]
        ran = be.last_choice
        check("the policy ran it on the device executor", ran.algorithm == "device", ran)
        check("a 64 MiB buffer gets larger chunks than a small one",
              ran.chunk_bytes > be._choose("allreduce", 4000, 4).chunk_bytes, ran)

# A fused group: several shapes in one call, and a pre/post-scaled one.
salt += 1
shapes = [(3, 5), (1000,), (7, 11, 13), (1,)]
mine = [cupy.asarray(inputs(r, int(np.prod(s)), "float32", salt + i).reshape(s)) for i, s in enumerate(shapes)]
outs = bf.grouped_allreduce(mine, op=bf.Sum, name="group")
for i, (s, out) in enumerate(zip(shapes, outs)):
    want, magnitude = summed(inputs(q, int(np.prod(s)), "float32", salt + i).reshape(s) for q in range(n))
    close(f"grouped_allreduce tensor {i} {s}", out, want, "float32", magnitude)
scaled = bf.allreduce(mine[1], op=bf.Sum, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
want, magnitude = summed(inputs(q, 1000, "float32", salt + 1) for q in range(n))
close("allreduce prescale/postscale", scaled, 1.5 * want, "float32", 1.5 * magnitude)

# Broadcast from the last rank, allgather with a first dimension that differs per rank.
salt += 10
root = n - 1
mine = cupy.asarray(inputs(r, 5000, "float32", salt))
close("broadcast", bf.broadcast(mine, root_rank=root, name="bcast"),
      inputs(root, 5000, "float32", salt).astype(np.float64), "float32")
rows = cupy.asarray(inputs(r, 3 * (r + 1), "float32", salt + 1).reshape(r + 1, 3))
close("allgather uneven", bf.allgather(rows, name="gather"),
      np.concatenate([inputs(q, 3 * (q + 1), "float32", salt + 1).reshape(q + 1, 3) for q in range(n)]).astype(np.float64),
      "float32")

# Reduce-scatter: rank q keeps the q-th part of the sum (Horovod: the first dimension split as
# evenly as it goes, the first ranks taking the remainder).
salt += 1
total = 4 * n + 1
mine = cupy.asarray(inputs(r, total * 2, "float32", salt).reshape(total, 2))
want, magnitude = summed(inputs(q, total * 2, "float32", salt).reshape(total, 2) for q in range(n))
counts = [total // n + (1 if q < total % n else 0) for q in range(n)]
mine_rows = slice(sum(counts[:r]), sum(counts[:r + 1]))
close("reducescatter", bf.reducescatter(mine, op=bf.Sum, name="rs"), want[mine_rows], "float32",
      magnitude[mine_rows], same_everywhere=False)

# The route: the cuda backend moved the data, the cpu backend nothing (a 1-rank job moves
# nothing at all, so there is nothing to look at).
if n > 1:
    backends = rt.RUNTIME.engine._backends
    check("the cuda backend ran the collectives",
          "cuda" in backends and (backends["cuda"].executor.launches + sum(backends["cuda"].state.sent.values())) > 0,
          sorted(backends))
    check("the cpu backend moved nothing", "cpu" not in backends or not any(backends["cpu"].state.sent.values()),
          sorted(backends))

everyone = bf.allgather_object(digests)
for label, digest in digests:
    others = {dict(d)[label] for d in everyone}
    check(f"{label} bitwise identical on every rank", len(others) == 1, others)

bf.shutdown()
if checks.failures:
    checks.report("API OK")
print(f"API OK {n} ranks {checks.count}", flush=True)
