"""Adasum (``op=blinkflow.Adasum``) through the runtime, against a numpy reference of Horovod's
algorithm: the pairwise combination a' = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b, tensor by
tensor, over the tree of ranks (0 with 1, 2 with 3, then the pairs' results, ...).

Run by ``test_adasum.py`` under mpirun at 1, 2, 3 and 4 ranks; at 3 every Adasum call must be
refused on every rank. Each rank can compute every rank's input, so each checks the whole result.
"""
import sys

import numpy as np

import blinkflow as bf
from blinkflow.errors import InvalidArgumentError
from harness import close, run_cases, skip


def power_of_two(n):
    return n & (n - 1) == 0


def needs_power_of_two(n):
    if not power_of_two(n):
        skip(f"Adasum runs on a power-of-two number of ranks; {n} is refused (case refused_off_a_power_of_two)")


def inputs(q, sizes, dtype="float64", salt=0):
    """Rank ``q``'s tensors: seeded, signed, of different directions per rank."""
    rng = np.random.default_rng(1000 * salt + q)
    return [rng.standard_normal(s).astype(dtype) for s in sizes]


def pair(a, b):
    """Horovod's pairwise Adasum of two tensors, in float64."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    dot, anorm, bnorm = a @ b, a @ a, b @ b
    tiny = np.sqrt(np.finfo(np.float64).tiny)
    acoeff = 1.0 - dot / anorm / 2 if anorm >= tiny else 1.0
    bcoeff = 1.0 - dot / bnorm / 2 if bnorm >= tiny else 1.0
    return acoeff * a + bcoeff * b


def reference(per_rank):
    """Tree of pairs over the ranks (a power of two of them), tensor by tensor: list of float64."""
    level = [[t.astype(np.float64).ravel() for t in tensors] for tensors in per_rank]
    while len(level) > 1:
        level = [[pair(a, b) for a, b in zip(level[i], level[i + 1])] for i in range(0, len(level), 2)]
    return [t.reshape(s.shape) for t, s in zip(level[0], per_rank[0])]


def magnitude(per_rank, i):
    return 4 * sum(np.abs(tensors[i].astype(np.float64)) for tensors in per_rank)


def expect_refused(call, *hints):
    try:
        call()
    except InvalidArgumentError as e:
        for hint in hints:
            assert hint in str(e), (hint, str(e))
        return
    raise AssertionError(f"no InvalidArgumentError (wanted one saying {hints})")


def case_one_tensor_matches_the_reference(r, n):
    needs_power_of_two(n)
    for dtype in ("float64", "float32", "float16"):
        for size in (1, 7, 1000):
            per_rank = [inputs(q, [(size,)], dtype, salt=size) for q in range(n)]
            got = bf.allreduce(per_rank[r][0], op=bf.Adasum, name=f"one.{dtype}.{size}")
            assert got.dtype == np.dtype(dtype) and got.shape == (size,)
            close(got, reference(per_rank)[0].astype(dtype), magnitude(per_rank, 0), ranks=n, what=dtype)


def case_fused_tensors_take_their_own_dot_products(r, n):
    """A group of tensors of very different scales (and an empty one) fused into one buffer: each
    tensor is combined with its own coefficients, as Horovod does."""
    needs_power_of_two(n)
    sizes = [(3, 4), (0,), (1,), (257,), (2, 2, 2)]
    per_rank = [inputs(q, sizes, salt=7) for q in range(n)]
    for q in range(n):
        per_rank[q][3] *= 1e3 * (q + 1)  # one tensor far larger than the rest
    got = bf.grouped_allreduce(per_rank[r], op=bf.Adasum, name="fused")
    for i, want in enumerate(reference(per_rank)):
        assert got[i].shape == sizes[i], (got[i].shape, sizes[i])
        close(got[i], want, magnitude(per_rank, i), ranks=n, what=f"member {i}")


def case_parallel_gradients_average_and_orthogonal_ones_add(r, n):
    needs_power_of_two(n)
    same = np.array([1.0, -2.0, 3.0])
    close(bf.allreduce(same.copy(), op=bf.Adasum, name="parallel"), same, 4 * n * np.abs(same), ranks=n)
    axis = np.zeros(max(n, 1))
    axis[r] = 1.0 + r
    close(bf.allreduce(axis, op=bf.Adasum, name="orthogonal"), np.arange(1.0, n + 1), 4.0 * n, ranks=n)
    zeros = np.zeros(4)
    close(bf.allreduce(zeros, op=bf.Adasum, name="zeros"), zeros)  # no division by a zero norm


def case_every_rank_gets_the_same_bits(r, n):
    needs_power_of_two(n)
    mine = inputs(r, [(10001,)], "float32", salt=3)[0]
    got = bf.allreduce(mine, op=bf.Adasum, name="bits")
    everyone = bf.allgather(got[np.newaxis], name="bits.gathered")
    assert all(np.array_equal(row.view(np.uint32), got.view(np.uint32)) for row in everyone)


def case_scale_factors_apply_before_and_after(r, n):
    needs_power_of_two(n)
    per_rank = [inputs(q, [(33,)], salt=5) for q in range(n)]
    got = bf.allreduce(per_rank[r][0], op=bf.Adasum, name="scaled", prescale_factor=0.5, postscale_factor=3.0)
    want = 3.0 * reference([[t * 0.5 for t in tensors] for tensors in per_rank])[0]
    close(got, want, 3 * magnitude(per_rank, 0), ranks=n)


def case_process_set_of_the_even_ranks(r, n):
    if n < 4:
        skip(f"needs 4 ranks for a set of 2 inside the job; this run has {n}")
    evens = bf.add_process_set(range(0, n, 2))
    try:
        if r % 2 == 0:
            members = list(range(0, n, 2))
            if not power_of_two(len(members)):
                skip(f"the even ranks are {len(members)}, not a power of two")
            per_rank = [inputs(q, [(50,)], salt=11) for q in members]
            got = bf.allreduce(per_rank[members.index(r)][0], op=bf.Adasum, name="evens", process_set=evens)
            close(got, reference(per_rank)[0], magnitude(per_rank, 0), ranks=len(members))
    finally:
        bf.remove_process_set(evens)


def case_gpu_tensors_take_the_host_path(r, n):
    """CuPy arrays come back as CuPy arrays on the rank's GPU, combined on the host."""
    needs_power_of_two(n)
    try:
        import cupy
    except ImportError:
        skip("no CuPy here (test_adasum_on_fake_cupy runs this case with the fake CuPy)")
    per_rank = [inputs(q, [(5, 3), (17,)], "float32", salt=13) for q in range(n)]
    got = bf.grouped_allreduce([cupy.asarray(t) for t in per_rank[r]], op=bf.Adasum, name="on.gpu")
    for i, want in enumerate(reference(per_rank)):
        assert isinstance(got[i], cupy.ndarray), type(got[i])
        close(cupy.asnumpy(got[i]), want.astype("float32"), magnitude(per_rank, i), ranks=n, what=f"member {i}")


def case_integer_tensors_are_refused_on_every_rank(r, n):
    expect_refused(lambda: bf.allreduce(np.arange(4, dtype=np.int32), op=bf.Adasum, name="ints"),
                   "floating-point", "int32")
    expect_refused(lambda: bf.grouped_allreduce([np.zeros(2), np.zeros(2, np.int64)], op=bf.Adasum, name="mixed"),
                   "floating-point", "int64")


def case_reducescatter_is_refused(r, n):
    expect_refused(lambda: bf.reducescatter(np.zeros(n * 2), op=bf.Adasum, name="rs"), "Adasum is an all-reduce")


def case_refused_off_a_power_of_two(r, n):
    if power_of_two(n):
        skip(f"{n} ranks is a power of two: Adasum runs (the other cases)")
    expect_refused(lambda: bf.allreduce(np.ones(3), op=bf.Adasum, name="odd"), "power-of-two", str(n))
    after = bf.allreduce(np.ones(3), op=bf.Sum, name="after")  # the runtime goes on
    assert np.array_equal(after, np.full(3, float(n)))


if __name__ == "__main__":
    bf.init()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    bf.shutdown()
