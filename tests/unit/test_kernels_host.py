"""Run the real kernel bodies of ``kernels/*.cu`` on the CPU, thread by thread (``kernel_host``).

There is no GPU in CI, so the nvcc test alone would only prove the kernels compile; a
sequential run of every block and thread computes what the GPU computes. Checked against numpy: every op x dtype, the
16-byte vector path and the misaligned scalar path, tails, in-place use, the forwarded second
output, scale, and pack/unpack. Skipped only when no C++ compiler is installed.
"""
import ctypes

import numpy as np
import pytest

from blinkflow.backends.cuda import kernels
from blinkflow.ops import ReduceOp
from blinkflow.scaling import kernel_factor

from kernel_host import CXX, build
from kernel_reference import DTYPES, OPS, bf16_to_f32, f32_to_bf16, make_inputs, reference, storage

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build(tmp_path_factory.mktemp("kernels_host"))


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def run_reduce(lib, dtype, op, inputs, out, out2=None, grid=3, block=32):
    ins = (ctypes.c_void_p * 8)(*[a.ctypes.data for a in inputs])
    fn = getattr(lib, f"reduce_{dtype}_{kernels.OP_CODES[op]}")
    fn(_ptr(out), _ptr(out2) if out2 is not None else ctypes.c_void_p(0), ins, ctypes.c_int(len(inputs)),
       ctypes.c_longlong(out.size), ctypes.c_int(grid), ctypes.c_int(block))


def aligned(n, dtype, offset):
    """A zeroed array whose data starts ``offset`` elements past a 16-byte boundary."""
    dt = storage(dtype)
    raw = np.zeros(n + offset + 16, dtype=dt)
    skip = (-raw.ctypes.data % 16) // dt.itemsize
    return raw[skip + offset: skip + offset + n]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("offset", [0, 1])
def test_reduce_matches_numpy(lib, dtype, op, offset):
    rng = np.random.default_rng(abs(hash((dtype, int(op), offset))) % 2**32)
    for k in (1, 2, 3, 8):
        for n in (1, 5, 16, 17, 1000, 1003):
            host = make_inputs(dtype, op, n, k, rng, exact=False)
            ins = [aligned(n, dtype, offset) for _ in range(k)]
            for a, h in zip(ins, host):
                a[...] = h
            out, out2 = aligned(n, dtype, offset), aligned(n, dtype, offset)
            run_reduce(lib, dtype, op, ins, out, out2)
            want = reference(dtype, op, host)
            np.testing.assert_array_equal(out, want, err_msg=f"{dtype} {op.name} k={k} n={n} offset={offset}")
            np.testing.assert_array_equal(out2, want)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "uint8"])
@pytest.mark.parametrize("offsets", [(0, 0, 0), (3, 3, 3), (0, 1, 0), (2, 2, 1)], ids=str)
def test_reduce_unrolled_groups_heads_and_tails(lib, dtype, offsets):
    """A small grid (2 blocks of 4 threads), so sizes run whole unrolled groups of
    ``BF_UNROLL`` vectors per thread, a partial last group and a scalar tail; pointers that
    share a misalignment get a scalar head, pointers that do not run all scalar."""
    rng = np.random.default_rng(7)
    out_offset, in_offset, last_offset = offsets
    for n in (63, 64 * 4 + 5, 32 * 9 + 31, 4096 + 3):
        host = make_inputs(dtype, ReduceOp.SUM, n, 3, rng, exact=False)
        ins = [aligned(n, dtype, o) for o in (in_offset, in_offset, last_offset)]
        for a, h in zip(ins, host):
            a[...] = h
        out, out2 = aligned(n, dtype, out_offset), aligned(n, dtype, out_offset)
        run_reduce(lib, dtype, ReduceOp.SUM, ins, out, out2, grid=2, block=4)
        want = reference(dtype, ReduceOp.SUM, host)
        np.testing.assert_array_equal(out, want, err_msg=f"{dtype} n={n} offsets={offsets}")
        np.testing.assert_array_equal(out2, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_in_place_like_recv_reduce(lib, dtype):
    rng = np.random.default_rng(1)
    a, b = make_inputs(dtype, ReduceOp.SUM, 999, 2, rng, exact=False)
    buf, slot = aligned(999, dtype, 0), aligned(999, dtype, 0)
    buf[...], slot[...] = a, b
    run_reduce(lib, dtype, ReduceOp.SUM, [buf, slot], buf)
    np.testing.assert_array_equal(buf, reference(dtype, ReduceOp.SUM, [a, b]))


def test_min_max_propagate_nan(lib):
    a = np.array([1, np.nan, 3, np.nan] * 5, dtype=np.float32)
    b = np.array([np.nan, 2, 1, np.nan] * 5, dtype=np.float32)
    for op, fn in ((ReduceOp.MIN, np.minimum), (ReduceOp.MAX, np.maximum)):
        out = np.zeros_like(a)
        run_reduce(lib, "float32", op, [a, b], out)
        np.testing.assert_array_equal(out, fn(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("factor", [0.5, 1 / 3, 3.0])
@pytest.mark.parametrize("offset", [0, 1])
def test_scale_matches_cpu_backend(lib, dtype, factor, offset):
    from blinkflow.backends.base import Backend

    rng = np.random.default_rng(2)
    n = 1037
    if dtype == "bfloat16":
        host = f32_to_bf16(rng.normal(scale=20, size=n))
        want = f32_to_bf16(bf16_to_f32(host) * np.float32(kernel_factor("bfloat16", factor)))
    else:
        values = rng.integers(0, 80, size=n) if dtype in ("uint8", "int32", "int64") else rng.normal(scale=20, size=n)
        host = values.astype(dtype)
        want = host.copy()
        Backend.scale(None, want, factor)  # the semantics every backend shares
    buf = aligned(n, dtype, offset)
    buf[...] = host
    getattr(lib, f"scale_{dtype}")(_ptr(buf), _ptr(buf), ctypes.c_double(kernel_factor(dtype, factor)),
                                   ctypes.c_longlong(n), ctypes.c_int(2), ctypes.c_int(64))
    np.testing.assert_array_equal(buf, want)


@pytest.mark.parametrize("itemsize,dtype", [(1, np.uint8), (2, np.float16), (4, np.float32), (8, np.float64)])
def test_pack_unpack_round_trip(lib, itemsize, dtype):
    rng = np.random.default_rng(4)
    sizes = [0, 1, 5, 64, 33, 1001]
    tensors = [rng.integers(0, 100, size=s).astype(dtype) for s in sizes]
    tensors[2] = np.zeros(6, dtype=dtype)[1:]  # a misaligned one
    tensors[2][...] = 7
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum([t.size for t in tensors], out=offsets[1:])
    flat = aligned(int(offsets[-1]) + 3, np.dtype(dtype).name, 0)
    ptrs = np.array([t.ctypes.data for t in tensors], dtype=np.uint64)
    args = (ptrs.ctypes.data_as(ctypes.POINTER(ctypes.c_ulonglong)), offsets.ctypes.data_as(ctypes.POINTER(ctypes.c_longlong)),
            ctypes.c_int(len(tensors)), ctypes.c_int(2), ctypes.c_int(2), ctypes.c_int(32))
    getattr(lib, f"pack_{itemsize}")(_ptr(flat), *args)
    np.testing.assert_array_equal(flat[:offsets[-1]], np.concatenate(tensors))
    outs = [np.zeros_like(t) for t in tensors]
    ptrs[:] = [o.ctypes.data for o in outs]
    getattr(lib, f"unpack_{itemsize}")(_ptr(flat), *args)
    for t, o in zip(tensors, outs):
        np.testing.assert_array_equal(o, t)
