"""Every collective, op, dtype and shape of the runtime, checked on every rank in one launch.

Run by ``test_runtime.py`` under mpirun at 1, 2, 3 and 4 ranks. Each rank can compute every
other rank's input (inputs are functions of the rank), so each checks its results against
numpy. Each case reports through the test harness (tests/harness.py).
"""
import os
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from harness import close as within_rounding, run_cases, skip

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
SHAPES = [(), (5,), (2, 3, 4), (0,), (3, 0, 2)]
OPS = [bf.Sum, bf.Average, bf.Min, bf.Max, bf.Product]
UFUNC = {bf.Sum: np.add, bf.Min: np.minimum, bf.Max: np.maximum, bf.Product: np.multiply}


def value(r, shape, dtype, op=None):
    """Rank r's input: small values so Product and Sum stay in range for every dtype."""
    n = int(np.prod(shape))
    base = np.arange(n).reshape(shape) if shape else np.array(3)
    if dtype == "bool":
        return ((base + r) % 2 == 0).astype(bool)
    if op == bf.Product:
        return ((base + r) % 2 + 1).astype(dtype)
    signed = np.dtype(dtype).kind in "if"
    out = (base % 5) + r + 1
    if signed:
        out = out * np.where(base % 2 == 0, 1, -1) if shape else out
    return out.astype(dtype)


def expected_allreduce(shape, dtype, op, size, pre=1.0, post=1.0):
    inputs = [value(r, shape, dtype, op) for r in range(size)]
    if pre != 1.0:
        inputs = [scale(x, pre) for x in inputs]
    acc = inputs[0].copy()
    for x in inputs[1:]:
        acc = UFUNC[op.combiner](acc, x).astype(dtype)
    if op == bf.Average and acc.dtype.kind in "iu":  # divided (truncating toward zero), not times 1/size
        return np.trunc(acc.astype(np.float64) * post / size).astype(dtype)
    factor = post / size if op == bf.Average else post
    return scale(acc, factor)


def scale(x, factor):
    if factor == 1.0:
        return x
    if x.dtype.kind in "iub":
        return (x * factor).astype(x.dtype)
    return x * x.dtype.type(factor)


def close(got, want, dtype):
    """``got`` has ``dtype`` and equals ``want`` within the rounding of a reduction over the job's
    ranks (exactly, for integers). The inputs are whole numbers of one sign per element, so their
    summed magnitudes are at most ranks x |want| (the sum itself, or ranks x the average)."""
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    n = bf.size()
    within_rounding(got, want, magnitude=n * np.abs(np.asarray(want, np.float64)), ranks=n)


def case_basics(r, n):
    assert bf.is_initialized() and bf.size() == n and bf.rank() == r
    bf.init()  # twice is harmless
    assert 0 <= bf.local_rank() < bf.local_size() and 0 <= bf.cross_rank() < bf.cross_size()
    assert bf.local_size() * bf.cross_size() == n  # one machine, evenly split
    hosts = int(os.environ.get("BLINKFLOW_SPLIT_HOSTS", "0"))
    if hosts:  # consecutive blocks of ranks act as hosts
        per = n // hosts
        assert (bf.cross_size(), bf.cross_rank(), bf.local_size(), bf.local_rank()) == (hosts, r // per, per, r % per)
    else:
        assert (bf.cross_size(), bf.local_size(), bf.local_rank()) == (1, n, r)
    assert isinstance(bf.mpi_threads_supported(), bool)


def case_allreduce_everything(r, n):
    """Every dtype x op x shape, all in flight at once (fused where they fit)."""
    handles, wants = [], []
    for dtype in DTYPES:
        for op in OPS:
            if dtype == "bool" and op == bf.Average:
                continue
            for shape in SHAPES:
                x = value(r, shape, dtype, op)
                before = x.copy()
                handles.append((rt.allreduce_async(x, op=op, name=f"ar.{dtype}.{op.name}.{shape}"), x, before))
                wants.append((expected_allreduce(shape, dtype, op, n), dtype))
    for (h, x, before), (want, dtype) in zip(handles, wants):
        got = rt.synchronize(h)
        close(got, want, dtype)
        assert np.array_equal(x, before), "input was modified"
    # twice more through the same names: the response-cache fast path
    for _ in range(2):
        hs = [rt.allreduce_async(value(r, (5,), "float32"), op=bf.Sum, name="ar.float32.SUM.(5,)")]
        close(rt.synchronize(hs[0]), expected_allreduce((5,), "float32", bf.Sum, n), "float32")


def case_allreduce_scaling_and_layout(r, n):
    x = value(r, (4, 6), "float32")
    got = bf.allreduce(x[:, ::2], op=bf.Sum, name="nc")  # non-contiguous input
    want = sum(value(q, (4, 6), "float32")[:, ::2] for q in range(n))
    close(got, want.astype("float32"), "float32")
    got = bf.allreduce(x.T, op=bf.Average, prescale_factor=2.0, postscale_factor=0.5, name="nc.T")
    close(got, (sum(value(q, (4, 6), "float32") for q in range(n)) / n).T.astype("float32"), "float32")
    got = bf.allreduce(value(r, (7,), "int32"), op=bf.Average, prescale_factor=3.0, name="int.pre")
    close(got, expected_allreduce((7,), "int32", bf.Average, n, pre=3.0), "int32")
    got = bf.allreduce(value(r, (7,), "float64"), op=bf.Max, postscale_factor=-1.0, name="max.post")
    close(got, expected_allreduce((7,), "float64", bf.Max, n, post=-1.0), "float64")
    got = bf.allreduce(value(r, (3, 5), "float32"), op=bf.Sum, compression=bf.Compression.fp16, name="fp16")
    close(got, expected_allreduce((3, 5), "float32", bf.Sum, n), "float32")
    outs = bf.grouped_allreduce([value(r, s, d) for s, d in [((3,), "float32"), ((2, 2), "int64"), ((), "float16")]],
                                op=bf.Sum, name="group")
    for got, (s, d) in zip(outs, [((3,), "float32"), ((2, 2), "int64"), ((), "float16")]):
        close(got, expected_allreduce(s, d, bf.Sum, n), d)
    assert bf.grouped_allreduce([]) == []
    # Members that are not plain native numpy arrays (a list, a big-endian array, a subclass) are
    # converted one by one, the rest taken as they are.
    outs = bf.grouped_allreduce([[r, 1], np.full(3, r, ">f4"), np.ma.masked_array(np.ones(2)), np.ones(2, np.int8)],
                                op=bf.Sum, name="group.converted")
    expected = [np.array([n * (n - 1) // 2, n]), np.full(3, n * (n - 1) / 2, np.float32), np.full(2, float(n)),
                np.full(2, n, np.int8)]
    for got, want in zip(outs, expected):
        assert type(got) is np.ndarray and got.dtype == want.dtype.newbyteorder("=") and np.array_equal(got, want), \
            (got, want)
    got = bf.allreduce(np.float64(r), op=bf.Sum)  # a numpy scalar, unnamed
    assert got.shape == () and got == sum(range(n))


def case_scale_factors_match_horovod_bit_for_bit(r, n):
    """Horovod's test_horovod_allreduce_cpu_prescale / _postscale: float16 scaled in float32 and
    integers in float64 (truncated toward zero), cast back before the sum; equal bit for bit at
    up to 3 ranks. (float16 used to be scaled by the factor rounded to float16: 21.375 where
    Horovod has 21.359375.)"""
    rng = np.random.RandomState(1234)
    factor = rng.uniform()
    for dtype in ["uint8", "int8", "int32", "int64", "float16", "float32"]:
        for dim in (1, 2, 3):
            high = 100 if dtype not in ("uint8", "int8") else 1
            low = -high if dtype != "uint8" else 0
            x = rng.uniform(low, high, size=(17,) * dim).astype(dtype)  # the same on every rank
            wide = np.float32 if dtype == "float16" else np.float64 if dtype[0] in "ui" else np.dtype(dtype).type
            with np.errstate(over="ignore"):
                pre = bf.allreduce(x, op=bf.Sum, prescale_factor=factor, name=f"hvd.pre.{dtype}.{dim}")
                want_pre = (x.astype(wide) * wide(factor)).astype(dtype) * np.array(n, dtype)
                post = bf.allreduce(x, op=bf.Sum, postscale_factor=factor, name=f"hvd.post.{dtype}.{dim}")
                want_post = ((x * np.array(n, dtype)).astype(wide) * wide(factor)).astype(dtype)
            if n <= 3 or dtype[0] in "ui":
                assert np.array_equal(pre, want_pre), (dtype, dim, pre.ravel()[:4], want_pre.ravel()[:4])
                assert np.array_equal(post, want_post), (dtype, dim, post.ravel()[:4], want_post.ravel()[:4])
    # A float16 value whose scaled result differs with a float16-rounded factor.
    x = np.full(4, 20.44, np.float16)
    got = bf.allreduce(x, op=bf.Sum, postscale_factor=1.0457, name="hvd.post.example")
    assert np.array_equal(got, ((x * np.float16(n)).astype(np.float32) * np.float32(1.0457)).astype(np.float16)), got


def case_reducescatter_scale_factors_and_groups(r, n):
    """reducescatter(prescale_factor=, postscale_factor=) (Horovod's, with the all-reduce's
    arithmetic) and grouped_reducescatter (one request, every member scattered alike)."""
    rows = 2 * n + 1
    counts = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
    start = sum(counts[:r])
    x = value(r, (rows, 2), "float32")
    got = bf.reducescatter(x, op=bf.Sum, prescale_factor=0.5, postscale_factor=4.0, name="rs.scaled")
    want = sum(value(q, (rows, 2), "float32") * np.float32(0.5) for q in range(n)) * np.float32(4.0)
    close(got, want[start:start + counts[r]], "float32")
    got = bf.reducescatter(value(r, (rows,), "int32"), op=bf.Average, postscale_factor=3.0, name="rs.int.avg")
    full = sum(value(q, (rows,), "int32") for q in range(n))
    close(got, np.trunc(full.astype(np.float64) * 3.0 / n).astype("int32")[start:start + counts[r]], "int32")
    outs = bf.grouped_reducescatter([value(r, (rows,), "float64"), value(r, (rows, 3), "int64")], op=bf.Sum,
                                    name="rs.group")
    for got, (shape, dtype) in zip(outs, [((rows,), "float64"), ((rows, 3), "int64")]):
        close(got, sum(value(q, shape, dtype) for q in range(n))[start:start + counts[r]], dtype)
    assert bf.grouped_reducescatter([]) == []


def case_allgather(r, n):
    for dtype in DTYPES:
        for tail in [(), (3, 2)]:
            x = value(r, (r % 3,) + tail, dtype)  # rank r sends r % 3 rows (0 rows on some ranks)
            got = bf.allgather(x, name=f"ag.{dtype}.{tail}")
            want = np.concatenate([value(q, (q % 3,) + tail, dtype) for q in range(n)])
            close(got, want, dtype)
    x = value(r, (4, 6), "int32")[::2, 1::2]
    close(bf.allgather(x), np.concatenate([value(q, (4, 6), "int32")[::2, 1::2] for q in range(n)]), "int32")
    swapped = value(r, (2, 3), "int32").astype(">i4")  # non-native byte order: values, not bytes, travel
    close(bf.allgather(swapped, name="ag.swapped"), np.concatenate([value(q, (2, 3), "int32") for q in range(n)]),
          "int32")
    close(bf.alltoall(value(r, (n, 2), "float64").astype(">f8"), name="a2a.swapped"),
          np.concatenate([value(q, (n, 2), "float64")[r:r + 1] for q in range(n)]), "float64")
    outs = bf.grouped_allgather([value(r, (r + 1,), "float32"), value(r, (2, 2), "int8")], name="gag")
    close(outs[0], np.concatenate([value(q, (q + 1,), "float32") for q in range(n)]), "float32")
    close(outs[1], np.concatenate([value(q, (2, 2), "int8") for q in range(n)]), "int8")


def case_broadcast(r, n):
    for root in range(n):
        for dtype in DTYPES:
            for shape in [(), (3,), (2, 3, 4), (0,)]:
                x = value(r, shape, dtype)
                got = bf.broadcast(x, root, name=f"bc.{root}.{dtype}.{shape}")
                close(got, value(root, shape, dtype), dtype)
        got = bf.broadcast(value(r, (6, 4), "float64").T, root)  # non-contiguous, unnamed
        close(got, value(root, (6, 4), "float64").T.copy(), "float64")


def case_reducescatter(r, n):
    rows = 2 * n + 1
    counts = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
    start = sum(counts[:r])
    handles = []
    for op in OPS:
        for dtype in DTYPES[1:]:  # every dtype but bool, all in flight at once
            for tail in [(), (2, 3)]:
                x = value(r, (rows,) + tail, dtype, op)
                handles.append((rt.reducescatter_async(x, op=op, name=f"rs.{op.name}.{dtype}.{tail}"),
                                expected_allreduce((rows,) + tail, dtype, op, n), dtype))
    for h, full, dtype in handles:
        close(rt.synchronize(h), full[start:start + counts[r]], dtype)
    x = value(r, (rows, 4), "float32")[:, ::2]  # non-contiguous
    want = sum(value(q, (rows, 4), "float32")[:, ::2] for q in range(n))
    close(bf.reducescatter(x, op=bf.Sum, name="rs.nc"), want[start:start + counts[r]], "float32")
    got = bf.reducescatter(value(r, (1,), "float32"), op=bf.Sum, name="rs.tiny")  # fewer rows than ranks
    assert got.shape == ((1,) if r == 0 else (0,))


def case_alltoall(r, n):
    x = np.repeat(np.arange(n, dtype=np.int64) * 10 + r, 2)  # rows 2q, 2q+1 go to rank q
    got = bf.alltoall(x, name="a2a.even")
    assert np.array_equal(got, np.repeat(np.arange(n) + 10 * r, 2)), got
    splits = [(q + r) % 3 for q in range(n)]  # uneven, some empty
    rows = sum(splits)
    x = (np.arange(rows * 2).reshape(rows, 2) + 100 * r).astype(np.float32)
    out, received = bf.alltoall(x, splits=splits, name="a2a.splits")
    want_splits = [(r + q) % 3 for q in range(n)]
    assert list(received) == want_splits, (received, want_splits)
    pieces = []
    for q in range(n):
        their = [(p + q) % 3 for p in range(n)]
        start = sum(their[:r])
        src = (np.arange(sum(their) * 2).reshape(-1, 2) + 100 * q).astype(np.float32)
        pieces.append(src[start:start + their[r]])
    assert np.array_equal(out, np.concatenate(pieces)), (out, pieces)
    for dtype in DTYPES:  # every dtype, 3-d, non-contiguous input
        x = value(r, (2 * n, 3, 4), dtype)[:, :, ::2]
        got = bf.alltoall(x, name=f"a2a.{dtype}")
        want = np.concatenate([value(q, (2 * n, 3, 4), dtype)[:, :, ::2][2 * r:2 * r + 2] for q in range(n)])
        close(got, want, dtype)


def case_objects_and_barrier(r, n):
    for root in range(n):
        assert bf.broadcast_object({"from": r, "list": list(range(r))}, root_rank=root) == {"from": root, "list": list(range(root))}
    assert bf.allgather_object(("rank", r)) == [("rank", q) for q in range(n)]
    bf.barrier()


def case_large_and_many(r, n):
    """Tensors larger than the fusion buffer (BLINKFLOW_FUSION_THRESHOLD=65536 in this launch) and
    many small ones in flight at once."""
    big = value(r, (50_000,), "float32")  # 200 kB > 64 kB
    hs = [rt.allreduce_async(big, op=bf.Sum, name="big")]
    hs += [rt.allreduce_async(value(r, (100,), "float64"), op=bf.Sum, name=f"many.{i}") for i in range(200)]
    close(rt.synchronize(hs[0]), expected_allreduce((50_000,), "float32", bf.Sum, n), "float32")
    for h in hs[1:]:
        close(rt.synchronize(h), expected_allreduce((100,), "float64", bf.Sum, n), "float64")
    close(bf.broadcast(value(r, (40_000,), "float64"), n - 1, name="bigbc"), value(n - 1, (40_000,), "float64"), "float64")


def expect_mismatch(name, fn, r, n):
    try:
        fn()
    except bf.TensorMismatchError as e:
        assert name in str(e) and e.name in (name, name + ".1"), str(e)  # grouped: the member that differs
        assert "rank 0" in str(e) and f"rank {n - 1}" in str(e), str(e)
        return str(e)
    raise AssertionError(f"{name}: no TensorMismatchError on rank {r}")


def case_mismatches(r, n):
    if n == 1:
        skip("one rank cannot disagree with another")
    last = r == n - 1
    f32 = np.ones(3, np.float32)
    cases = {
        "mm.shape": lambda: bf.allreduce(np.ones(4 if last else 3, np.float32), name="mm.shape"),
        "mm.dtype": lambda: bf.allreduce(np.ones(3, np.float64 if last else np.float32), name="mm.dtype"),
        "mm.op": lambda: bf.allreduce(f32, op=bf.Max if last else bf.Sum, name="mm.op"),
        "mm.root": lambda: bf.broadcast(f32, 1 if last else 0, name="mm.root"),
        "mm.prescale": lambda: bf.allreduce(f32, prescale_factor=2.0 if last else 1.0, name="mm.prescale"),
        "mm.postscale": lambda: bf.allreduce(f32, postscale_factor=2.0 if last else 1.0, name="mm.postscale"),
        "mm.kind": lambda: (bf.allgather(f32, name="mm.kind") if last else bf.allreduce(f32, name="mm.kind")),
        "mm.tail": lambda: bf.allgather(np.ones((2, 3 if last else 2)), name="mm.tail"),
        "mm.rsop": lambda: bf.reducescatter(np.ones(n), op=bf.Min if last else bf.Max, name="mm.rsop"),
        "mm.a2a": lambda: bf.alltoall(np.ones((n, 2), np.int32 if last else np.float32), name="mm.a2a"),
        "mm.grouped": lambda: bf.grouped_allreduce([f32, np.ones(2 if last else 3)], name="mm.grouped"),
    }
    for name, fn in cases.items():
        message = expect_mismatch(name, fn, r, n)
        close(bf.allreduce(np.ones(2, np.float32), op=bf.Sum, name="after." + name), np.full(2, n, np.float32), "float32")
    assert "shape" in expect_mismatch("mm.shape", cases["mm.shape"], r, n)
    # A name that is cached (negotiated before) and then mismatches: the invalidation path.
    for _ in range(2):
        bf.allreduce(np.ones(3, np.float32), name="mm.cached")
    expect_mismatch("mm.cached", lambda: bf.allreduce(np.ones(5 if last else 3, np.float32), name="mm.cached"), r, n)
    close(bf.allreduce(np.ones(3, np.float32), op=bf.Sum, name="mm.cached"), np.full(3, n, np.float32), "float32")


def case_duplicate_name(r, n):
    h = rt.allreduce_async(np.ones(2), name="dup")
    again = rt.allreduce_async(np.ones(2), name="dup")  # refused on every rank, after the first
    close(rt.synchronize(h), np.ones(2), "float64")
    try:
        rt.synchronize(again)
    except bf.DuplicateNameError as e:
        assert "'dup'" in str(e) and "while its first call was in flight" in str(e), e
    else:
        raise AssertionError("no DuplicateNameError")
    close(bf.allreduce(np.ones(2), name="dup"), np.ones(2), "float64")  # free again


def case_local_errors(r, n):
    """Bad arguments fail at once on the calling rank, with a message that says what to do."""
    bad = {
        "reshape it to (1,)": lambda: bf.allgather(np.float32(1)),
        "not a rank of this job": lambda: bf.broadcast(np.ones(2), n),
        "summing to the first dimension": lambda: bf.alltoall(np.ones(3), splits=[4] + [0] * (n - 1)),
        "is not supported": lambda: bf.allreduce(np.ones(2, np.complex64)),
        "reserved": lambda: bf.allreduce(np.ones(2), name="__bf_mine"),
        "unknown reduce op": lambda: bf.allreduce(np.ones(2), op="median"),
        "Average is not defined for bool": lambda: bf.allreduce(np.ones(2, bool)),
        "not defined for bool tensors": lambda: bf.reducescatter(np.ones(n, bool), name="rs.bool"),
        "allreduce 'group.bool' was refused by rank":
            lambda: bf.grouped_allreduce([np.ones(2), np.ones(3, bool)], name="group.bool"),
        "complex64 is not supported": lambda: bf.grouped_allreduce([np.ones(2), np.ones(2, np.complex64)]),
    }
    if n > 1:
        bad["not divisible"] = lambda: bf.alltoall(np.ones(2 * n + 1))
    for hint, fn in bad.items():
        try:
            fn()
        except bf.BlinkflowError as e:
            assert hint in str(e), (hint, str(e))
        else:
            raise AssertionError(f"no error for {hint!r}")
    close(bf.allreduce([1, 2], op=bf.Sum, name="list.input"), np.array([n, 2 * n]), "int64")
    # Refused unnamed calls use up their automatic names like accepted ones (every rank makes the
    # same calls; only rank 0's are bad here), so the next unnamed calls still match across ranks.
    good = [lambda: bf.allgather(np.ones(1)), lambda: bf.broadcast(np.ones(2), 0),
            lambda: bf.alltoall(np.ones(n), splits=[1] * n), lambda: bf.allreduce(np.ones(2))]
    for fn, fine in zip(list(bad.values())[:4], good):
        try:
            fn() if r == 0 else fine()
        except bf.InvalidArgumentError as e:
            assert "refused by rank 0" in str(e), str(e)
        else:
            raise AssertionError("rank 0's refusal did not reach every rank")
    close(bf.allreduce(np.ones(2), op=bf.Sum), np.full(2, float(n)), "float64")
    close(bf.allgather(np.ones(1)), np.ones(n), "float64")


def case_one_rank_errs_and_names_stay_in_step(r, n):
    """What one rank alone gets wrong, or does differently, must neither leave the others waiting
    nor shift the automatic names: unnamed calls in different numbers before a join; an empty
    group on one rank; a scale factor that is not a number; an object that cannot be pickled;
    init on another communicator."""
    from mpi4py import MPI

    for _ in range(r + 1):  # different counts of unnamed calls per rank, then join
        bf.allreduce(np.ones(2), op=bf.Sum)
    bf.join()
    close(bf.allreduce(np.ones(2), op=bf.Sum), np.full(2, float(n)), "float64")
    assert bf.grouped_allreduce([], op=bf.Sum) == [] and bf.grouped_allgather([]) == []
    if n > 1:
        try:
            bf.grouped_allreduce([] if r == 0 else [np.ones(3)], op=bf.Sum)
        except bf.TensorMismatchError as e:
            assert "grouped_allreduce.noname" in str(e), str(e)
        else:
            raise AssertionError("an empty group on rank 0 only was not an error")
    for bad in (None, float("nan"), "x"):
        try:
            bf.allreduce(np.ones(2), prescale_factor=bad if r == 0 else 1.0)
        except bf.InvalidArgumentError as e:
            assert "refused by rank 0: prescale_factor must be a finite number" in str(e), str(e)
        else:
            raise AssertionError(f"prescale_factor={bad!r} was accepted")
    close(bf.grouped_allreduce([np.ones(2)], op=bf.Sum)[0], np.full(2, float(n)), "float64")
    close(bf.allreduce(np.ones(2), op=bf.Sum), np.full(2, float(n)), "float64")
    unpicklable = lambda: None  # noqa: E731
    try:
        bf.broadcast_object(unpicklable if r == 0 else None, root_rank=0)
    except bf.BlinkflowError as e:
        assert "root rank 0 could not pickle" in str(e), str(e)
    else:
        raise AssertionError("an unpicklable object was broadcast")
    try:
        bf.allgather_object(unpicklable if r == n - 1 else r)
    except bf.BlinkflowError as e:
        assert f"ranks [{n - 1}] could not pickle" in str(e), str(e)
    else:
        raise AssertionError("an unpicklable object was gathered")
    assert bf.allgather_object(r) == list(range(n))
    bf.init(comm=MPI.COMM_WORLD)  # the running job's ranks: nothing to do
    if n > 1:
        try:
            bf.init(comm=MPI.COMM_SELF)
        except bf.BlinkflowError as e:
            assert "already running on another communicator" in str(e), str(e)
        else:
            raise AssertionError("init on another communicator was ignored")
    assert bf.size() == n


def case_poll_and_async(r, n):
    h = rt.allreduce_async(np.ones(3), op=bf.Sum, name="polled")
    while not rt.poll(h):
        time.sleep(0.001)  # never blocks; a bare spin would starve the background thread of the GIL
    assert rt.poll(h)
    close(rt.synchronize(h), np.full(3, float(n)), "float64")
    try:
        rt.synchronize(h)
    except bf.BlinkflowError as e:
        assert "unknown handle" in str(e)
    else:
        raise AssertionError("a spent handle synchronized twice")


def case_join(r, n):
    """Rank r runs r + 1 all-reduces, then joins: the others go on with its zeros."""
    for i in range(r + 1):
        got = bf.allreduce(np.ones(4, np.int32), op=bf.Sum, name=f"join.{i}")
        assert np.array_equal(got, np.full(4, n - i)), (i, got)
    last = bf.join()
    assert last == n - 1, last  # join.{n-1} cannot be ready before every other rank has joined
    assert bf.allgather_object(last) == [last] * n
    close(bf.allreduce(np.ones(2), op=bf.Sum, name="after.join"), np.full(2, float(n)), "float64")


def case_single_copy(r, n):
    """All-reduces large enough for the cpu backend's single-copy path (peers' tensors read and
    results written in place, by cross-memory attach), when the host allows it: every op and
    dtype, odd sizes, 3-d and strided inputs, large groups mixing dtypes, a group of mostly small
    tensors, a joined rank's zeros; inputs untouched, results bitwise identical on every rank.
    The path's size threshold (a speed choice, shards of 4 MiB) is lowered on every rank for the
    small cases; one tensor above the real threshold checks the default choice."""
    from blinkflow.schedule import policy as cpu_backend

    backend = rt.RUNTIME.engine._backends["cpu"]
    expect = os.environ.get("EXPECT_SINGLE_COPY")
    used = expect == "1" and n > 1 and os.environ.get("BLINKFLOW_CPU_SINGLE_COPY", "1") == "1"
    if expect is not None and n > 1 and os.environ.get("BLINKFLOW_CPU_SINGLE_COPY", "1") == "1":
        assert (backend.single_copy is not None) == (expect == "1"), (expect, backend.single_copy)
    counted = dict(backend.stats)
    hosts_ranks = max(len(ranks) for ranks in backend.layout.host_ranks)  # the same on every rank (uneven hosts)
    large = cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES * hosts_ranks // 4 + 3  # float32 elements
    got = bf.allreduce(value(r, (large,), "float32"), op=bf.Sum, name="sc.large")
    close(got, expected_allreduce((large,), "float32", bf.Sum, n), "float32")
    if used:
        assert backend.stats["single_copy"] == counted["single_copy"] + 1, (counted, backend.stats)
    threshold, cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES = cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES, 0
    latency_bound, cpu_backend.MPI_ALLREDUCE_MAX_BYTES = cpu_backend.MPI_ALLREDUCE_MAX_BYTES, 0  # small: not MPI's
    try:
        _single_copy_cases(r, n, backend, used)
        if os.environ.get("SINGLE_COPY_MANY_PIECES") == "1":
            _single_copy_many_pieces(r, n, cpu_backend, backend, used)
    finally:
        cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES, cpu_backend.MPI_ALLREDUCE_MAX_BYTES = threshold, latency_bound
    if os.environ.get("BLINKFLOW_CPU_SINGLE_COPY") == "0":
        assert backend.stats["single_copy"] == 0, backend.stats


def case_contested_chunks(r, n):
    """Back-to-back single-copy all-reduces whose shards' owners and helpers keep meeting on the
    same chunk (both compute it and push it into each other's result): a Sum and a float
    Average, which would come out wrong were a push to land on a partial value. Short here;
    ``CONTESTED_CALLS`` (test_runtime) runs enough calls, with small chunks, for the meeting
    to fall mid-chunk (about 1 call in 1000 on the development VM before the fix)."""
    from blinkflow.schedule import policy as cpu_backend

    calls = int(os.environ.get("CONTESTED_CALLS", "20"))
    threshold, cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES = cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES, 0
    latency_bound, cpu_backend.MPI_ALLREDUCE_MAX_BYTES = cpu_backend.MPI_ALLREDUCE_MAX_BYTES, 0  # small: not MPI's
    try:
        ints, floats = value(r, (70_001,), "int32"), value(r, (70_001,), "float32")
        want_sum = expected_allreduce((70_001,), "int32", bf.Sum, n)
        want_average = expected_allreduce((70_001,), "float32", bf.Average, n)
        backend = rt.RUNTIME.engine._backends["cpu"]
        counted = backend.stats["single_copy"]
        wrong = []
        for i in range(calls):
            if i % 2:
                got = bf.allreduce(floats, op=bf.Average, name=f"contested.{i % 4}")
                ok = np.allclose(got, want_average, rtol=1e-6, atol=0)
            else:
                ok = np.array_equal(bf.allreduce(ints, op=bf.Sum, name=f"contested.{i % 4}"), want_sum)
            if not ok:
                wrong.append(i)
        assert not wrong, f"calls {wrong} of {calls} came out wrong on rank {r}"
        if os.environ.get("EXPECT_SINGLE_COPY") == "1" and n > 1:
            assert backend.stats["single_copy"] - counted == calls, (counted, backend.stats)
    finally:
        cpu_backend.SINGLE_COPY_MIN_SHARD_BYTES, cpu_backend.MPI_ALLREDUCE_MAX_BYTES = threshold, latency_bound


#: Bytes of every rank's address table in the launch that runs :func:`_single_copy_many_pieces`:
#: 2,046 pieces, where the product's 2 MiB hold about 131,000 (a group that large took 22 CPU-s).
SMALL_CONTROL_BYTES = 32 * 1024


def _small_address_tables():
    """Every rank's address table at :data:`SMALL_CONTROL_BYTES`, set before init (every rank
    alike: the table's size is where its last words lie)."""
    from blinkflow.backends.cpu import single_copy_path

    single_copy_path.CONTROL_BYTES = SMALL_CONTROL_BYTES


def _single_copy_many_pieces(r, n, cpu_backend, backend, used):
    """More pieces than a rank's address table holds (it then publishes a packed private copy),
    and tensors of every size straddling chunk boundaries (run with a small chunk)."""
    piece, cpu_backend.SINGLE_COPY_MIN_PIECE_BYTES = cpu_backend.SINGLE_COPY_MIN_PIECE_BYTES, 0
    try:
        counted = dict(backend.stats)
        many = [np.full(1, r + 1 + i % 7, np.float32) for i in range(3_000)]  # > SMALL_CONTROL_BYTES // 16
        outs = bf.grouped_allreduce(many, op=bf.Sum, name="sc.many")
        if used:  # the table overflowed: this rank published one packed copy of the group
            tables = backend.single_copy._words
            assert tables and len(tables[0]) == SMALL_CONTROL_BYTES // 8, "the address tables are not the small ones"
            packed = getattr(backend.single_copy, "_packed", None)
            assert packed is not None and packed.size == len(many), "the address table did not overflow"
        want = [sum(q + 1 + i % 7 for q in range(n)) for i in range(7)]
        assert all(o[0] == want[i % 7] for i, o in enumerate(outs))
        ragged = [value(r, (k * 37 + 1,), "float64") for k in range(60)]
        outs = bf.grouped_allreduce(ragged, op=bf.Sum, name="sc.ragged")
        for got, k in zip(outs, range(60)):
            close(got, expected_allreduce((k * 37 + 1,), "float64", bf.Sum, n), "float64")
        if used:
            assert backend.stats["single_copy"] - counted["single_copy"] == 2, (counted, backend.stats)
    finally:
        cpu_backend.SINGLE_COPY_MIN_PIECE_BYTES = piece


def _single_copy_cases(r, n, backend, used):
    big = 70_001  # elements: above the single-copy threshold for every dtype, not divisible by 2, 3, 4
    counted = dict(backend.stats)
    results = []
    for dtype in DTYPES:
        for op in OPS:
            if dtype == "bool" and op == bf.Average:
                continue
            x = value(r, (big,), dtype, op)
            before = x.copy()
            got = bf.allreduce(x, op=op, name=f"sc.{dtype}.{op.name}")
            close(got, expected_allreduce((big,), dtype, op, n), dtype)
            assert np.array_equal(x, before), "an input was written"
            results.append(got)
    cube = value(r, (40, 50, 60), "float32")
    got = bf.allreduce(cube[:, ::2], op=bf.Average, name="sc.strided")  # strided: copied, then in place
    close(got, expected_allreduce((40, 50, 60), "float32", bf.Average, n)[:, ::2], "float32")
    results.append(got)
    shapes = [((big,), "float32"), ((300, 401), "float64"), ((5,), "float32"), ((big,), "int64"), ((), "float32")]
    outs = bf.grouped_allreduce([value(r, s, d) for s, d in shapes], op=bf.Sum, name="sc.group")
    for got, (s, d) in zip(outs, shapes):
        close(got, expected_allreduce(s, d, bf.Sum, n), d)
    results += outs
    mostly_small = [((20,), "float32")] * 50 + [((1_000_000,), "float32")]  # mean piece > the threshold
    outs = bf.grouped_allreduce([value(r, s, d) for s, d in mostly_small], op=bf.Max, name="sc.small")
    for got, (s, d) in zip(outs, mostly_small):
        close(got, expected_allreduce(s, d, bf.Max, n), d)
    results += outs
    if used:
        # At least the 44 op x dtype cases and the strided one (how the groups are batched
        # depends on the fusion threshold of the launch).
        assert backend.stats["single_copy"] - counted["single_copy"] >= 45, (counted, backend.stats)
    for i, got in enumerate(results):  # bitwise identical on every rank
        every = bf.allgather(np.ascontiguousarray(got).reshape(1, -1).view(np.uint8), name=f"sc.same.{i}")
        assert all(np.array_equal(every[0], row) for row in every), i
    if n > 1:  # the last rank joins; the others reduce with its zeros
        if r == n - 1:
            bf.join()
        else:
            got = bf.allreduce(value(r, (big,), "float32"), op=bf.Sum, name="sc.joined")
            want = sum(value(q, (big,), "float32").astype(np.float64) for q in range(n - 1))
            close(got, want.astype(np.float32), "float32")
            bf.join()


def case_idle_is_quiet(r, n):
    """An idle runtime leaves the CPU to the application: its background thread neither spins in
    MPI waiting for its peers' cycles nor negotiates every millisecond (it used 20-70% of a core
    per rank here before, 12% with aligned cycles alone; now 2-3%). Measured in CPU time, which
    other load cannot inflate."""
    import resource

    bf.barrier()
    start, used = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(2.0)
    now = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (now.ru_utime - used.ru_utime) + (now.ru_stime - used.ru_stime)
    share = cpu / (time.monotonic() - start)
    assert share < 0.10, f"an idle rank used {share:.0%} of a core"
    close(bf.allreduce(np.ones(2), op=bf.Sum, name="after.idle"), np.full(2, float(n)), "float64")


def case_crossed_submissions(r, n):
    """Every rank first submits a tensor no other rank has submitted yet (each negotiation round
    then completes at once with nothing ready): the ranks wait without spinning, and everything
    completes once the rest is submitted, in whatever order."""
    import resource

    first = rt.allreduce_async(np.full(3, r, np.int64), op=bf.Sum, name=f"crossed.{r}")
    start, used = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(1.0)
    now = resource.getrusage(resource.RUSAGE_SELF)
    share = ((now.ru_utime - used.ru_utime) + (now.ru_stime - used.ru_stime)) / (time.monotonic() - start)
    # Measured: ~16 % of a core (rounds back off to 1 ms); 98 % without the back-off.
    assert share < 0.35, f"waiting for crossed submissions used {share:.0%} of a core"
    rest = [rt.allreduce_async(np.full(3, q, np.int64), op=bf.Sum, name=f"crossed.{q}")
            for q in reversed(range(n)) if q != r]
    assert np.array_equal(rt.synchronize(first), np.full(3, r * n))
    for h, q in zip(rest, [q for q in reversed(range(n)) if q != r]):
        assert np.array_equal(rt.synchronize(h), np.full(3, q * n))


def case_cache_fast_path(r, n):
    """Steady state: names negotiated before complete through the bit-vector all-reduce alone."""
    def fence():
        # A cached name: no rank can pass it (and submit new names, which need the slow path)
        # before every rank has read its counters.
        bf.allreduce(np.ones(1), name="steady.fence")

    bf.grouped_allreduce([np.ones(3)] * 5, op=bf.Sum, name="steady")  # first time: full negotiation
    fence()
    fence()
    stats = rt.RUNTIME.engine.negotiator.stats
    before = dict(stats)
    for _ in range(10):
        outs = bf.grouped_allreduce([np.full(3, float(r))] * 5, op=bf.Sum, name="steady")
        close(outs[4], np.full(3, float(sum(range(n)))), "float64")
    after = dict(stats)
    fence()
    assert after["slow_paths"] == before["slow_paths"], (before, after)
    assert after["cache_hits"] - before["cache_hits"] == 10, (before, after)  # a group is one cached unit


def case_threads(r, n):
    """Many user threads submitting at once (as TensorFlow's executor does)."""
    import threading

    results, errors = {}, []

    def work(t):
        try:
            for i in range(5):
                results[(t, i)] = bf.allreduce(np.full(4, t + i, np.int64), op=bf.Sum, name=f"thread.{t}.{i}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (t, i), got in results.items():
        assert np.array_equal(got, np.full(4, (t + i) * n)), got
    assert len(results) == 30


def case_shutdown_in_flight(r, n):
    """Rank 0 calls shutdown() while the others wait on a tensor it never submits: they raise
    ShutdownError naming rank 0 (no hang), and init() then starts afresh on every rank."""
    if n == 1:
        skip("needs a rank that waits while another shuts down")
    bf.barrier()
    if r == 0:
        bf.shutdown()
    else:
        try:
            bf.allreduce(np.ones(2), name="never.on.rank0")
        except bf.ShutdownError as e:
            assert e.rank == 0 and "shutdown() was called" in str(e), (e.rank, str(e))
        else:
            raise AssertionError("an all-reduce rank 0 never submitted returned")
        try:
            bf.allreduce(np.ones(2), name="after.stop")
        except bf.ShutdownError:
            pass
        else:
            raise AssertionError("a call after the job stopped did not raise ShutdownError")
        bf.shutdown()
    bf.init()
    close(bf.allreduce(np.ones(2), op=bf.Sum, name="after.peer.shutdown"), np.full(2, float(n)), "float64")


def case_restart(r, n):
    bf.shutdown()
    assert not bf.is_initialized()
    try:
        bf.allreduce(np.ones(1))
    except bf.NotInitializedError:
        pass
    else:
        raise AssertionError("no NotInitializedError after shutdown")
    bf.shutdown()  # twice is harmless
    bf.init()
    close(bf.allreduce(np.ones(2), op=bf.Sum, name="after.restart"), np.full(2, float(n)), "float64")
    if n >= 2:  # init on a sub-communicator: the even and the odd ranks form two jobs
        from mpi4py import MPI

        bf.shutdown()
        half = MPI.COMM_WORLD.Split(r % 2, r)
        bf.init(comm=half)
        assert bf.size() == half.Get_size() and bf.rank() == r // 2
        got = bf.allreduce(np.array([r]), op=bf.Sum, name="half")
        assert got[0] == sum(q for q in range(n) if q % 2 == r % 2), got
        bf.shutdown()
        half.Free()
        bf.init()
        assert bf.size() == n


def main():
    try:
        bf.rank()
    except bf.NotInitializedError as e:
        assert "init" in str(e)
    else:
        raise AssertionError("rank() before init did not raise")
    if os.environ.get("SINGLE_COPY_MANY_PIECES") == "1":
        _small_address_tables()
    bf.init()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    bf.shutdown()


if __name__ == "__main__":
    main()
