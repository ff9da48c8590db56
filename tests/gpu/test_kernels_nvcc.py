"""The kernels on a real GPU without CuPy: nvcc builds them with a small C ABI (copy in,
launch, copy out) that ctypes calls, and the results are held to the same numpy references as
the CuPy and host-emulated tests. For GPU machines where CuPy cannot be installed (the wheel
needs a package index); needs nvcc and a GPU, skipped otherwise."""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from blinkflow.backends.cuda import kernels
from blinkflow.scaling import kernel_factor
from gpu_detect import nvidia_smi_gpus
from kernel_reference import DTYPES, OPS, make_inputs, reference, storage

NEEDS_CUPY = False
NVCC = shutil.which("nvcc")

HARNESS = r"""
#include <cuda_runtime.h>
template <typename T, int OP>
static int bf_run_reduce(void* out, void* out2, void** in, int nin, long long n, int misalign) {
    size_t bytes = (size_t)(n + misalign) * sizeof(T);
    char* d[10] = {0};
    for (int j = 0; j < nin + 2; ++j) if (cudaMalloc((void**)&d[j], bytes + 16) != cudaSuccess) return 1;
    const T* p[8] = {0};
    for (int j = 0; j < nin; ++j) {
        cudaMemcpy(d[j] + misalign * sizeof(T), in[j], n * sizeof(T), cudaMemcpyHostToDevice);
        p[j] = (const T*)(d[j] + misalign * sizeof(T));
    }
    T* o = (T*)(d[nin] + misalign * sizeof(T));
    T* o2 = (T*)(d[nin + 1] + misalign * sizeof(T));
    int grid = (int)((n + 255) / 256); if (grid > 64) grid = 64; if (grid < 1) grid = 1;
    blinkflow_reduce<T, OP><<<grid, 256>>>(o, o2, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], nin, n);
    int err = (int)cudaDeviceSynchronize();
    cudaMemcpy(out, o, n * sizeof(T), cudaMemcpyDeviceToHost);
    cudaMemcpy(out2, o2, n * sizeof(T), cudaMemcpyDeviceToHost);
    for (int j = 0; j < nin + 2; ++j) cudaFree(d[j]);
    return err;
}
template <typename T>
static int bf_run_scale(void* buf, double f, long long n) {
    T* d = 0;
    if (cudaMalloc((void**)&d, n * sizeof(T) + 16) != cudaSuccess) return 1;
    cudaMemcpy(d, buf, n * sizeof(T), cudaMemcpyHostToDevice);
    blinkflow_scale<T><<<8, 128>>>(d, d, f, n);
    int err = (int)cudaDeviceSynchronize();
    cudaMemcpy(buf, d, n * sizeof(T), cudaMemcpyDeviceToHost);
    cudaFree(d);
    return err;
}
extern "C" int bf_device_count() { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0; }
"""


def _wrappers():
    out = []
    for dt, ctype in kernels.CTYPES.items():
        for op, code in kernels.OP_CODES.items():
            out.append(f'extern "C" int reduce_{dt}_{code}(void* o, void* o2, void** in, int nin, long long n, int m) '
                       f'{{ return bf_run_reduce<{ctype}, {code}>(o, o2, in, nin, n, m); }}')
        out.append(f'extern "C" int scale_{dt}(void* b, double f, long long n) {{ return bf_run_scale<{ctype}>(b, f, n); }}')
    return "\n".join(out)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if nvidia_smi_gpus() == 0:  # module scope runs before the autouse check: do not compile in vain
        pytest.skip("nvidia-smi lists no GPU")
    if NVCC is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("kernels_nvcc")
    src = d / "harness.cu"
    src.write_text("\n".join(kernels.module_source(n) for n in ("reduce.cu", "scale.cu")) + HARNESS + _wrappers())
    so = d / "harness.so"
    cmd = [NVCC, *kernels.OPTIONS, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
           "-gencode", "arch=compute_90,code=[sm_90,compute_90]", "-o", str(so), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lib = ctypes.CDLL(str(so))
    if lib.bf_device_count() < 1:
        pytest.skip("the CUDA runtime sees no device (driver too old for this nvcc?)")
    return lib


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("misalign", [0, 1])
def test_reduce_on_gpu(lib, dtype, op, misalign):
    rng = np.random.default_rng(abs(hash((dtype, int(op), misalign))) % 2**32)
    for k in (2, 3, 8):
        for n in (1, 17, 1000, 70001):
            host = [np.ascontiguousarray(a) for a in make_inputs(dtype, op, n, k, rng, exact=False)]
            out, out2 = np.zeros(n, storage(dtype)), np.zeros(n, storage(dtype))
            ins = (ctypes.c_void_p * 8)(*[a.ctypes.data for a in host])
            err = getattr(lib, f"reduce_{dtype}_{kernels.OP_CODES[op]}")(
                ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(out2.ctypes.data), ins, k, ctypes.c_longlong(n), misalign)
            assert err == 0, f"CUDA error {err}"
            want = reference(dtype, op, host)
            np.testing.assert_array_equal(out, want, err_msg=f"{dtype} {op.name} k={k} n={n}")
            np.testing.assert_array_equal(out2, want)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint8"])
def test_scale_on_gpu(lib, dtype):
    from blinkflow.backends.base import Backend

    rng = np.random.default_rng(8)
    values = rng.integers(0, 80, size=5001) if dtype in ("uint8", "int32", "int64") else rng.normal(scale=20, size=5001)
    buf = values.astype(dtype)
    want = buf.copy()
    Backend.scale(None, want, 1 / 3)
    assert getattr(lib, f"scale_{dtype}")(ctypes.c_void_p(buf.ctypes.data), ctypes.c_double(kernel_factor(dtype, 1 / 3)),
                                          ctypes.c_longlong(buf.size)) == 0
    np.testing.assert_array_equal(buf, want)

