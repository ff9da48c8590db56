"""Run the real kernel bodies of ``kernels/*.cu`` on the CPU, thread by thread.

There is no GPU in CI, so the nvcc test alone would only prove the kernels compile. Here the
same source (``module_source``) is compiled as C++ with a small shim (``__global__`` and
``__device__`` vanish, ``blockIdx``/``threadIdx`` are globals, ``_Float16`` replaces the PTX
conversions under ``BLINKFLOW_HOST_EMULATION``) and every block and thread of a small grid is
run in turn. The kernels use grid-stride loops with no shared memory or barriers, so a
sequential run computes what the GPU computes. Checked against numpy: every op x dtype, the
16-byte vector path and the misaligned scalar path, tails, in-place use, the forwarded second
output, scale, and pack/unpack. Skipped only when no C++ compiler is installed.
"""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from blinkflow.backends.cuda import kernels
from blinkflow.backends.cuda.launch import host_factor
from blinkflow.ops import ReduceOp

from kernel_reference import DTYPES, OPS, bf16_to_f32, f32_to_bf16, make_inputs, reference, storage

CXX = shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")

SHIM = r"""
#include <cstring>
#define BLINKFLOW_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
struct bf_dim3 { unsigned int x, y, z; };
static bf_dim3 blockIdx, threadIdx, blockDim, gridDim;
struct uint4 { unsigned int x, y, z, w; };
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
#define BF_FOR_EACH_THREAD(gx, gy, bx, body)                                                   \
    gridDim = {(unsigned)(gx), (unsigned)(gy), 1}; blockDim = {(unsigned)(bx), 1, 1};            \
    for (unsigned by_ = 0; by_ < gridDim.y; ++by_)                                               \
        for (unsigned b_ = 0; b_ < gridDim.x; ++b_)                                              \
            for (unsigned t_ = 0; t_ < blockDim.x; ++t_) {                                       \
                blockIdx = {b_, by_, 0}; threadIdx = {t_, 0, 0}; body;                           \
            }
"""


def _wrappers():
    out = []
    for dt, ctype in kernels.CTYPES.items():
        for op, code in kernels.OP_CODES.items():
            out.append(f"""extern "C" void reduce_{dt}_{code}(void* o, void* o2, void** in, int nin, long long n, int gx, int bx) {{
    typedef {ctype} T; const T* p[8] = {{0}}; for (int j = 0; j < nin; ++j) p[j] = (const T*)in[j];
    BF_FOR_EACH_THREAD(gx, 1, bx, (blinkflow_reduce<T, {code}>((T*)o, (T*)o2, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], nin, n)));
}}""")
        out.append(f"""extern "C" void scale_{dt}(void* o, const void* in, double f, long long n, int gx, int bx) {{
    typedef {ctype} T; BF_FOR_EACH_THREAD(gx, 1, bx, (blinkflow_scale<T>((T*)o, (const T*)in, f, n)));
}}""")
    for size, word in kernels.WORDS.items():
        for kind in ("pack", "unpack"):
            flat = "void*" if kind == "pack" else "const void*"
            out.append(f"""extern "C" void {kind}_{size}({flat} flat, const unsigned long long* ptrs, const long long* offs, int nt, int gx, int gy, int bx) {{
    BF_FOR_EACH_THREAD(gx, gy, bx, (blinkflow_{kind}<{word}>(({'' if kind == 'pack' else 'const '}{word}*)flat, ptrs, offs, nt)));
}}""")
    return "\n".join(out)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("kernels_host")
    src = d / "kernels_host.cpp"
    body = "\n".join(kernels.module_source(n) for n in ("reduce.cu", "scale.cu", "pack.cu"))
    src.write_text(SHIM + body + "\n" + _wrappers())
    so = d / "kernels_host.so"
    cmd = [CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas", "-o", str(so), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return ctypes.CDLL(str(so))


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
        want = f32_to_bf16(bf16_to_f32(host) * np.float32(host_factor("bfloat16", factor)))
    else:
        values = rng.integers(0, 80, size=n) if dtype in ("uint8", "int32", "int64") else rng.normal(scale=20, size=n)
        host = values.astype(dtype)
        want = host.copy()
        Backend.scale(None, want, factor)  # the semantics every backend shares
    buf = aligned(n, dtype, offset)
    buf[...] = host
    getattr(lib, f"scale_{dtype}")(_ptr(buf), _ptr(buf), ctypes.c_double(host_factor(dtype, factor)),
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
