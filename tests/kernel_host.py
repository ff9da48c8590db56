"""The real kernel bodies of ``kernels/*.cu`` compiled as C++ for the CPU, thread by thread.

The same source (``module_source``) is compiled with a small shim (``__global__`` and
``__device__`` vanish, ``blockIdx``/``threadIdx`` are globals, ``_Float16`` replaces the PTX
conversions under ``BLINKFLOW_HOST_EMULATION``) and every block and thread of a small grid is run
in turn. The kernels use grid-stride loops with no shared memory or barriers, so a sequential run
computes what the GPU computes. Each kernel instantiation gets a C entry point:
``reduce_<dtype>_<op code>``, ``scale_<dtype>``, ``pack_<bytes>`` and ``unpack_<bytes>``.
"""
import ctypes
import shutil
import subprocess

from blinkflow.backends.cuda import kernels

CXX = shutil.which("g++") or shutil.which("clang++")
"""The C++ compiler, or None (tests that need the library skip then)."""

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


def build(directory) -> ctypes.CDLL:
    """Compile the kernels for the host into ``directory`` and load them."""
    src = directory / "kernels_host.cpp"
    body = "\n".join(kernels.module_source(n) for n in ("reduce.cu", "scale.cu", "pack.cu"))
    src.write_text(SHIM + body + "\n" + _wrappers())
    so = directory / "kernels_host.so"
    cmd = [CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas", "-o", str(so), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the host build of the kernels failed:\n{proc.stderr[-4000:]}")
    return ctypes.CDLL(str(so))


INTERPRETER_SHIM = r"""
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>
#define BLINKFLOW_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static thread_local
struct bf_dim3 { unsigned int x, y, z; };
static thread_local bf_dim3 blockIdx, threadIdx;
static bf_dim3 blockDim, gridDim;
struct uint4 { unsigned int x, y, z, w; };
static inline void __syncthreads() {}
static inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
"""


def _interpreter_wrappers():
    out = []
    for dt, ctype in kernels.CTYPES.items():
        for op, code in kernels.OP_CODES.items():
            out.append(f"""extern "C" void interpreter_{dt}_{code}(void* bufs, const long long* offs, const long long* steps,
        const long long* inputs, const long long* waits, const long long* starts, const long long* conns,
        long long* progress, const int* abort, long long call, long long window, long long slot_elems, int nblocks) {{
    typedef {ctype} T;
    gridDim = {{(unsigned)nblocks, 1, 1}}; blockDim = {{1, 1, 1}};
    std::vector<std::thread> blocks;
    for (int b = 0; b < nblocks; ++b)
        blocks.emplace_back([=] {{
            blockIdx = {{(unsigned)b, 0, 0}}; threadIdx = {{0, 0, 0}};
            blinkflow_interpreter<T, {code}>((T*)bufs, offs, steps, inputs, waits, starts, conns, progress, abort,
                                               call, window, slot_elems);
        }});
    for (auto& t : blocks) t.join();
}}""")
    return "\n".join(out)


def build_interpreter(directory) -> ctypes.CDLL:
    """Compile ``kernels/interpreter.cu`` for the host into ``directory`` and load it: entry points
    ``interpreter_<dtype>_<op code>`` run every block of a launch as its own OS thread of one
    CUDA thread each (``blockDim.x == 1``, so a barrier is a no-op and ``__shared__`` is
    per-thread), spinning on the same counters a GPU's blocks spin on."""
    src = directory / "interpreter_host.cpp"
    src.write_text(INTERPRETER_SHIM + kernels.module_source("interpreter.cu") + "\n" + _interpreter_wrappers())
    so = directory / "interpreter_host.so"
    cmd = [CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-Wno-unknown-pragmas", "-o", str(so), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the host build of the interpreter failed:\n{proc.stderr[-4000:]}")
    return ctypes.CDLL(str(so))
