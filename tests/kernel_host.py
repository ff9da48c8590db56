"""The real kernel bodies of ``kernels/*.cu`` compiled as C++ for the CPU, thread by thread.

The same source (``module_source``) is compiled with a small shim (``__global__`` and
``__device__`` vanish, ``blockIdx``/``threadIdx`` are globals, ``_Float16`` replaces the PTX
conversions and C++ atomics of the same strength the PTX loads and stores under
``BLINKFLOW_HOST_EMULATION``, see ``kernels/common.cuh``).

* ``build``: reduce, scale and pack, every block and thread of a small grid run in turn. These
  kernels use grid-stride loops with no shared memory or barriers, so a sequential run computes
  what the GPU computes. Entry points ``reduce_<dtype>_<op code>``, ``scale_<dtype>``,
  ``pack_<bytes>`` and ``unpack_<bytes>``.
* ``build_interpreter``: the device executor's kernel, every thread of every block its own OS
  thread (``INTERPRETER_SHIM``); ``kernel_race.py`` builds the same source under
  ThreadSanitizer.
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
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#define BLINKFLOW_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
struct bf_dim3 { unsigned int x, y, z; };
static thread_local bf_dim3 blockIdx, threadIdx;
static bf_dim3 blockDim, gridDim;
struct uint4 { unsigned int x, y, z, w; };
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
// One emulated thread block: its threads' barrier (__syncthreads) and its shared memory
// (BF_BLOCK_SHARED). The barrier blocks on a condition variable instead of spinning, and orders
// every thread's accesses before it ahead of every thread's accesses after it, as bar.sync does.
struct BfHostBlock {
    std::mutex m;
    std::condition_variable cv;
    unsigned threads = 1, arrived = 0, generation = 0;
    alignas(16) unsigned char shared[4096];
    void sync() {
        std::unique_lock<std::mutex> lock(m);
        const unsigned g = generation;
        if (++arrived == threads) {
            arrived = 0;
            ++generation;
            cv.notify_all();
        } else {
            cv.wait(lock, [&] { return generation != g; });
        }
    }
};
static thread_local BfHostBlock* bf_host_block;
static inline void __syncthreads() { bf_host_block->sync(); }
static inline void* bf_host_block_shared(size_t bytes) {
    if (bytes > sizeof(bf_host_block->shared)) std::abort();
    return bf_host_block->shared;
}
// A launch: every thread of every block is its own OS thread, all started before any is joined
// (blocks wait for each other, so they must all be resident, as on the GPU).
template <typename F> static void bf_host_launch(int nblocks, int threads, F kernel) {
    gridDim = {(unsigned)nblocks, 1, 1};
    blockDim = {(unsigned)threads, 1, 1};
    std::vector<std::unique_ptr<BfHostBlock>> blocks;
    for (int b = 0; b < nblocks; ++b) {
        blocks.emplace_back(new BfHostBlock());
        blocks.back()->threads = (unsigned)threads;
    }
    std::vector<std::thread> all;
    for (int b = 0; b < nblocks; ++b)
        for (int t = 0; t < threads; ++t)
            all.emplace_back([=, &blocks] {
                blockIdx = {(unsigned)b, 0, 0};
                threadIdx = {(unsigned)t, 0, 0};
                bf_host_block = blocks[b].get();
                kernel();
            });
    for (auto& t : all) t.join();
}
"""


def _interpreter_wrappers(instances):
    out = []
    for dt, code in instances:
        out.append(f"""extern "C" void interpreter_{dt}_{code}(void* bufs, const long long* offs, const long long* steps,
        const long long* inputs, const long long* waits, const long long* starts, const long long* conns,
        long long* progress, const int* abort, long long call, long long window, long long slot_elems, int nblocks,
        int threads) {{
    typedef {kernels.CTYPES[dt]} T;
    bf_host_launch(nblocks, threads, [=] {{
        blinkflow_interpreter<T, {code}>((T*)bufs, offs, steps, inputs, waits, starts, conns, progress, abort, call,
                                           window, slot_elems);
    }});
}}""")
    return "\n".join(out)


def interpreter_source(instances, source=None) -> str:
    """The host C++ of ``kernels/interpreter.cu`` (or ``source``, an edited copy of it) with an
    ``interpreter_<dtype>_<op code>`` entry point per (dtype, op code) of ``instances``."""
    text = kernels.module_source("interpreter.cu") if source is None else source
    return INTERPRETER_SHIM + text + "\n" + _interpreter_wrappers(instances)


def build_interpreter(directory) -> ctypes.CDLL:
    """Compile ``kernels/interpreter.cu`` for the host into ``directory`` and load it: entry points
    ``interpreter_<dtype>_<op code>`` run a launch of ``nblocks`` blocks of ``threads`` threads,
    each thread its own OS thread, spinning on the same counters a GPU's blocks spin on, with a
    real barrier for ``__syncthreads`` and one shared-memory instance per block."""
    src = directory / "interpreter_host.cpp"
    instances = [(dt, code) for dt in kernels.CTYPES for code in kernels.OP_CODES.values()]
    src.write_text(interpreter_source(instances))
    so = directory / "interpreter_host.so"
    cmd = [CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-Wno-unknown-pragmas", "-o", str(so), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the host build of the interpreter failed:\n{proc.stderr[-4000:]}")
    return ctypes.CDLL(str(so))
