"""The public API (``bf.init``, ``bf.allreduce`` ...) on cupy arrays, end to end (runtime,
negotiation, fusion, the schedule runner, the cuda transport), ranks sharing the GPU.

Run by ``tests/gpu/test_api_gpu.py`` on a real GPU and by ``tests/mpi/test_api_fake_cupy.py``
under the fake CuPy. Every rank derives every rank's input from a seed, so each checks its
result against a float64 numpy reference itself; results must also be bitwise identical across
ranks (digests compared in the last case). A case script of the harness (tests/harness.py).
"""
import hashlib

import cupy
import numpy as np

import blinkflow as bf
from blinkflow.config import get_config
from blinkflow.runtime import api as rt
from harness import close as close_within_rounding
from harness import run_cases, skip

bf.init()
n, r = bf.size(), bf.rank()
digests = []
LARGE_CHOICE = []   # the policy's choice for the large all-reduce (read by a later case)

# Odd sizes on purpose: shards and chunks that do not divide evenly; 1<<20 + 3 spans chunks.
SIZES = (1, 1000, (1 << 20) + 3)
#: Elements compared at a time: every page of new memory costs a fault (system time that grows
#: with the ranks faulting at once), so a 16 Mi-element result is checked through temporaries of
#: 8 MiB, which the allocator reuses, not through full-size float64 copies.
CHECK_BLOCK = 1 << 20


def inputs(rank: int, nelems: int, dtype: str, salt: int) -> np.ndarray:
    """Rank ``rank``'s input, drawn from a seed of its rank and ``salt``."""
    rng = np.random.default_rng(1000 * rank + salt)
    if dtype == "int32":
        return rng.integers(-1000, 1000, nelems).astype(np.int32)
    # Drawn in float32 (float16 rounds from it): float64 draws would make a temporary twice the
    # input's size, which every rank draws for every rank.
    return rng.standard_normal(nelems, dtype=np.float32).astype(dtype, copy=False)


def whole_inputs(rank: int, nelems: int) -> np.ndarray:
    """Rank ``rank``'s float32 input of small whole numbers, which every order of summing adds
    exactly: it differs from rank to rank and along the buffer, with a period of 1021 elements
    (a prime: no chunk, shard or stage boundary lines up with it). For a large buffer, whose
    reference would otherwise be every rank's random draw summed in float64 on every rank."""
    return ((np.arange(nelems, dtype=np.int32) * 7 + 13 * rank) % 1021 - 510).astype(np.float32)


def check(label: str, ok, detail="") -> None:
    if not ok:
        raise AssertionError(f"{label}: {detail}")


def agree(label: str, got) -> None:
    """Remember the digest of ``got`` (a cupy array, or its host copy) for the check that every
    rank holds the same bytes."""
    host = np.ascontiguousarray(cupy.asnumpy(got) if isinstance(got, cupy.ndarray) else got)
    digests.append((label, hashlib.sha1(host.reshape(-1).view(np.uint8)).hexdigest()))


def summed(parts):
    """The exact sum of ``parts`` (float64) and the sum of their magnitudes, element by element,
    accumulated in place: one part at a time is held, and no float64 copy is made of any."""
    total = magnitude = None
    for p in parts:
        if total is None:
            total = np.array(p, dtype=np.float64)
            magnitude = np.abs(total)
        else:
            total += p
            magnitude += np.abs(p)  # exact in p's dtype
    return total, magnitude


def close(label: str, got, want: np.ndarray, dtype: str, magnitude=0.0, same_everywhere=True) -> None:
    """``got`` is a cupy array of ``dtype`` equal to ``want`` within the rounding a reduction of
    inputs of total ``magnitude`` may do (0: exactly, as a copy must); ``same_everywhere``: every
    rank got these bytes."""
    check(f"{label} is a cupy array", isinstance(got, cupy.ndarray), type(got))
    host = cupy.asnumpy(got)
    check(f"{label} keeps its dtype", host.dtype == np.dtype(dtype), host.dtype)
    check(f"{label} has the shape {np.shape(want)}", host.shape == np.shape(want), host.shape)
    flat_host, flat_want = host.reshape(-1), np.ascontiguousarray(want).reshape(-1)
    scalar = np.ndim(magnitude) == 0
    flat_magnitude = magnitude if scalar else np.broadcast_to(magnitude, host.shape).reshape(-1)
    for start in range(0, max(1, flat_host.size), CHECK_BLOCK):
        part = slice(start, start + CHECK_BLOCK)
        close_within_rounding(flat_host[part], flat_want[part], magnitude if scalar else flat_magnitude[part],
                              ranks=n, what=f"{label} (elements from {start})")
    if same_everywhere:
        agree(label, host)


def case_allreduce_sum_and_average_of_every_dtype_and_size(rank, size):
    for d, dtype in enumerate(("float32", "float16", "int32")):
        for k, nelems in enumerate(SIZES):
            mine = cupy.asarray(inputs(r, nelems, dtype, 10 * d + k))
            want, magnitude = summed(inputs(q, nelems, dtype, 10 * d + k) for q in range(n))
            close(f"allreduce sum {dtype} {nelems}", bf.allreduce(mine, op=bf.Sum, name=f"sum.{dtype}.{nelems}"),
                  want, dtype, magnitude)
            check(f"allreduce {dtype} {nelems} leaves its input alone",
                  np.array_equal(cupy.asnumpy(mine), inputs(r, nelems, dtype, 10 * d + k)))
            if dtype != "int32":
                close(f"allreduce average {dtype} {nelems}",
                      bf.allreduce(mine, op=bf.Average, name=f"avg.{dtype}.{nelems}"), want / n, dtype, magnitude)


def case_allreduce_of_a_large_buffer_then_a_small_one(rank, size):
    """A buffer large enough for bigger automatic chunks, then a small one again: 32 MiB, the
    smallest whose runner chunk (a sixteenth, a power of two) passes the 1 MiB floor; on the
    device executor a chunk grows from 2 MiB per tree."""
    for salt, nelems in ((100, (8 << 20) + 5), (101, 1000)):
        if nelems > 1000:  # whole numbers: the exact sum is the reference (magnitude 0: equality)
            mine = cupy.asarray(whole_inputs(r, nelems))
            want, magnitude = whole_inputs(0, nelems), 0.0
            for q in range(1, n):
                want += whole_inputs(q, nelems)
        else:
            mine = cupy.asarray(inputs(r, nelems, "float32", salt))
            want, magnitude = summed(inputs(q, nelems, "float32", salt) for q in range(n))
        close(f"allreduce sum float32 {nelems} after growth", bf.allreduce(mine, op=bf.Sum, name=f"big.{nelems}"),
              want, "float32", magnitude)
        if nelems > 1000 and n > 1:
            LARGE_CHOICE.append(rt.RUNTIME.engine._backends["cuda"].last_choice)


def case_the_policy_gave_the_large_buffer_larger_chunks(rank, size):
    if n == 1:
        skip("one rank: no collective runs, no chunks are chosen")
    be = rt.RUNTIME.engine._backends["cuda"]
    ran = LARGE_CHOICE[-1]
    expected = "device" if get_config().algorithm == "device" else "runner"
    check(f"the policy ran it on the {expected} (BLINKFLOW_ALGORITHM={get_config().algorithm})",
          ran.algorithm == expected, ran)
    check("a 32 MiB buffer gets larger chunks than a small one",
          ran.chunk_bytes > be._choose("allreduce", 4000, 4).chunk_bytes, ran)


def case_a_fused_group_and_a_scaled_allreduce(rank, size):
    """Several shapes in one call, and a pre/post-scaled one."""
    salt = 200
    shapes = [(3, 5), (1000,), (7, 11, 13), (1,)]
    mine = [cupy.asarray(inputs(r, int(np.prod(s)), "float32", salt + i).reshape(s)) for i, s in enumerate(shapes)]
    outs = bf.grouped_allreduce(mine, op=bf.Sum, name="group")
    for i, (s, out) in enumerate(zip(shapes, outs)):
        want, magnitude = summed(inputs(q, int(np.prod(s)), "float32", salt + i).reshape(s) for q in range(n))
        close(f"grouped_allreduce tensor {i} {s}", out, want, "float32", magnitude)
    scaled = bf.allreduce(mine[1], op=bf.Sum, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
    want, magnitude = summed(inputs(q, 1000, "float32", salt + 1) for q in range(n))
    close("allreduce prescale/postscale", scaled, 1.5 * want, "float32", 1.5 * magnitude)


def case_broadcast_from_the_last_rank_and_an_uneven_allgather(rank, size):
    salt = 300
    root = n - 1
    mine = cupy.asarray(inputs(r, 5000, "float32", salt))
    close("broadcast", bf.broadcast(mine, root_rank=root, name="bcast"),
          inputs(root, 5000, "float32", salt).astype(np.float64), "float32")
    rows = cupy.asarray(inputs(r, 3 * (r + 1), "float32", salt + 1).reshape(r + 1, 3))
    close("allgather uneven", bf.allgather(rows, name="gather"),
          np.concatenate([inputs(q, 3 * (q + 1), "float32", salt + 1).reshape(q + 1, 3) for q in range(n)]).astype(np.float64),
          "float32")


def case_reducescatter(rank, size):
    """Rank q keeps the q-th part of the sum (Horovod: the first dimension split as evenly as it
    goes, the first ranks taking the remainder)."""
    salt = 400
    total = 4 * n + 1
    mine = cupy.asarray(inputs(r, total * 2, "float32", salt).reshape(total, 2))
    want, magnitude = summed(inputs(q, total * 2, "float32", salt).reshape(total, 2) for q in range(n))
    counts = [total // n + (1 if q < total % n else 0) for q in range(n)]
    mine_rows = slice(sum(counts[:r]), sum(counts[:r + 1]))
    close("reducescatter", bf.reducescatter(mine, op=bf.Sum, name="rs"), want[mine_rows], "float32",
          magnitude[mine_rows], same_everywhere=False)


def case_the_cuda_backend_moved_the_data_and_the_cpu_backend_nothing(rank, size):
    if n == 1:
        skip("one rank: a 1-rank job moves nothing at all")
    backends = rt.RUNTIME.engine._backends
    assert "cuda" in backends and (backends["cuda"].executor.launches
                                   + sum(backends["cuda"].state.sent.values())) > 0, \
        f"the cuda backend ran no collective: {sorted(backends)}"
    assert "cpu" not in backends or not any(backends["cpu"].state.sent.values()), \
        f"the cpu backend moved data: {sorted(backends)}"


def case_every_result_is_bitwise_identical_on_every_rank(rank, size):
    everyone = bf.allgather_object(digests)
    for label, digest in digests:
        others = {dict(d)[label] for d in everyone}
        assert len(others) == 1, f"{label} differs between ranks: {others}"


if __name__ == "__main__":
    run_cases(globals(), r, n)
    bf.shutdown()
