// Shared helpers of blinkflow's CUDA kernels (reduce.cu, scale.cu, pack.cu).
//
// Header-free on purpose: the kernels compile under NVRTC (CuPy RawModule) and nvcc alike
// without cuda_fp16.h / cuda_bf16.h, whose location differs between CUDA toolkits and CuPy
// wheels. float16 and bfloat16 are stored as 16-bit tags and computed in float.
#ifndef BLINKFLOW_COMMON_CUH
#define BLINKFLOW_COMMON_CUH

typedef unsigned char bf_u8;
typedef unsigned short bf_u16;
typedef unsigned int bf_u32;
typedef unsigned long long bf_u64;

// Storage tags for the 16-bit floating types (distinct types so templates can tell them apart).
struct bf_half { bf_u16 bits; };
struct bf_bfloat16 { bf_u16 bits; };

// Reduction op codes; must match blinkflow.backends.cuda.kernels.OP_CODES.
#define BF_OP_SUM 0
#define BF_OP_MIN 1
#define BF_OP_MAX 2
#define BF_OP_PROD 3

#if defined(BLINKFLOW_HOST_EMULATION)
// The CPU suite compiles these kernels as plain C++ and runs them thread by thread
// (tests/unit/test_kernels_host.py); there the conversions use the compiler's _Float16,
// which rounds to nearest even exactly like cvt.rn.f16.f32.
__device__ __forceinline__ float bf_half_to_float(bf_u16 h) {
    _Float16 x;
    __builtin_memcpy(&x, &h, 2);
    return (float)x;
}

__device__ __forceinline__ bf_u16 bf_float_to_half(float f) {
    _Float16 x = (_Float16)f;
    bf_u16 h;
    __builtin_memcpy(&h, &x, 2);
    return h;
}
#else
__device__ __forceinline__ float bf_half_to_float(bf_u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ bf_u16 bf_float_to_half(float f) {
    bf_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));  // round to nearest even, like numpy
    return h;
}
#endif

__device__ __forceinline__ float bf_bfloat16_to_float(bf_u16 b) {
    return __uint_as_float(((bf_u32)b) << 16);
}

// Round to nearest even in software: cvt.rn.bf16.f32 needs sm_80 and we also target sm_75.
__device__ __forceinline__ bf_u16 bf_float_to_bfloat16(float f) {
    bf_u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf_u16)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf_u16)(u >> 16);
}

// Traits: the arithmetic type of a storage type and the conversions between them.
// Integers compute in their unsigned twin so sums and products wrap like numpy instead of
// invoking signed-overflow undefined behaviour.
template <typename T> struct BfTraits {
    typedef T acc;
    static __device__ __forceinline__ acc load(T v) { return v; }
    static __device__ __forceinline__ T store(acc v) { return v; }
};
template <> struct BfTraits<bf_half> {
    typedef float acc;
    static __device__ __forceinline__ acc load(bf_half v) { return bf_half_to_float(v.bits); }
    static __device__ __forceinline__ bf_half store(acc v) { bf_half h; h.bits = bf_float_to_half(v); return h; }
};
template <> struct BfTraits<bf_bfloat16> {
    typedef float acc;
    static __device__ __forceinline__ acc load(bf_bfloat16 v) { return bf_bfloat16_to_float(v.bits); }
    static __device__ __forceinline__ bf_bfloat16 store(acc v) { bf_bfloat16 b; b.bits = bf_float_to_bfloat16(v); return b; }
};

template <typename T> struct BfWrap { typedef T type; };
template <> struct BfWrap<int> { typedef bf_u32 type; };
template <> struct BfWrap<long long> { typedef bf_u64 type; };

// NaN-propagating min/max (numpy.minimum/maximum semantics); a no-op test for integers.
template <typename A> __device__ __forceinline__ bool bf_isnan(A v) { return v != v; }

template <int OP, typename A> struct BfCombine;
template <typename A> struct BfCombine<BF_OP_SUM, A> {
    static __device__ __forceinline__ A apply(A a, A b) { return a + b; }
};
template <typename A> struct BfCombine<BF_OP_PROD, A> {
    static __device__ __forceinline__ A apply(A a, A b) { return a * b; }
};
template <typename A> struct BfCombine<BF_OP_MIN, A> {
    static __device__ __forceinline__ A apply(A a, A b) { return bf_isnan(a) ? a : (bf_isnan(b) ? b : (b < a ? b : a)); }
};
template <typename A> struct BfCombine<BF_OP_MAX, A> {
    static __device__ __forceinline__ A apply(A a, A b) { return bf_isnan(a) ? a : (bf_isnan(b) ? b : (b > a ? b : a)); }
};

// Apply OP in the arithmetic type; sums/products of signed integers go through unsigned.
template <int OP, typename T> struct BfOp {
    typedef typename BfTraits<T>::acc acc;
    static __device__ __forceinline__ acc apply(acc a, acc b) { return BfCombine<OP, acc>::apply(a, b); }
};
template <int OP> struct BfOp<OP, int> {
    static __device__ __forceinline__ int apply(int a, int b) {
        if (OP == BF_OP_SUM || OP == BF_OP_PROD)
            return (int)BfCombine<OP, bf_u32>::apply((bf_u32)a, (bf_u32)b);
        return BfCombine<OP, int>::apply(a, b);
    }
};
template <int OP> struct BfOp<OP, long long> {
    static __device__ __forceinline__ long long apply(long long a, long long b) {
        if (OP == BF_OP_SUM || OP == BF_OP_PROD)
            return (long long)BfCombine<OP, bf_u64>::apply((bf_u64)a, (bf_u64)b);
        return BfCombine<OP, long long>::apply(a, b);
    }
};
template <int OP> struct BfOp<OP, bf_u8> {
    // uint8 promotes to int in C++; truncate back so the sum wraps at 256 like numpy.
    static __device__ __forceinline__ bf_u8 apply(bf_u8 a, bf_u8 b) {
        return (bf_u8)BfCombine<OP, bf_u32>::apply((bf_u32)a, (bf_u32)b);
    }
};

// 16 bytes viewed as a vector of T: one ld.global.v4 per VEC elements.
template <typename T> union BfVec {
    enum { N = 16 / sizeof(T) };
    uint4 raw;
    T e[16 / sizeof(T)];
};

__device__ __forceinline__ bool bf_aligned16(const void* p) { return (((bf_u64)p) & 15u) == 0; }

// Elements before the first 16-byte boundary of p, when every pointer of a loop shares p's
// misalignment (then one scalar head aligns them all and the rest runs 16 bytes at a time);
// -1 when they do not (then only scalar accesses are possible).
template <typename T>
__device__ __forceinline__ long long bf_vector_head(const void* p, bool same_misalignment) {
    const bf_u32 m = (bf_u32)(((bf_u64)p) & 15u);
    if (!same_misalignment || m % sizeof(T) != 0) return -1;
    return (long long)(((16u - m) & 15u) / sizeof(T));
}

__device__ __forceinline__ bool bf_same_misalignment(const void* a, const void* b) {
    return ((((bf_u64)a) ^ ((bf_u64)b)) & 15u) == 0;
}

// Loads in flight per thread in the kernels' 16-byte loops: each thread issues BF_UNROLL
// independent 16-byte loads of a source before it uses any of them, so a block of T threads
// keeps BF_UNROLL * 16 * T bytes of every source in flight (Little's law: a
// block moves bytes-in-flight / latency per second; docs/cuda.md derives the numbers). NCCL's
// reduceCopy unrolls the same way (common_kernel.h).
#define BF_UNROLL 4

__device__ __forceinline__ uint4 bf_zero_v4() {
    uint4 v;
    v.x = v.y = v.z = v.w = 0u;
    return v;
}

// ---- Loads and stores of the device executor's cross-GPU protocol ----
//
// The interpreter's blocks exchange data through memory that other GPUs (NVLink, CUDA IPC), the
// host (the proxy) and other blocks write, under the PTX memory consistency model (PTX ISA,
// "Memory Consistency Model"): a volatile or relaxed access at system scope is coherent but
// orders nothing else. A reader that saw a counter reach a value must acquire it
// (ld.acquire.sys) before its loads of the data the counter covers are ordered after the
// writer's stores; the writer must release the counter (st.release.sys) after its stores. A
// barrier (bar.sync) extends either to the block's other threads: their stores before the
// barrier precede thread 0's release, thread 0's acquire precedes their loads after it. NCCL's
// Simple protocol posts and polls its step counters the same way (prims_simple.h).
//
// Under BLINKFLOW_HOST_EMULATION (tests/kernel_host.py, which runs this code under
// ThreadSanitizer) each maps to the C++ atomic operation of the same strength: volatile and
// relaxed to relaxed, acquire to acquire, release to release, a plain store to a plain store.
// Never stronger, so a missing acquire or release is a race the sanitizer reports.
// State a block's threads share (__shared__ on the GPU); the host build hands every emulated
// thread of a block the same instance (tests/kernel_host.py defines bf_host_block_shared).
#if defined(BLINKFLOW_HOST_EMULATION)
#define BF_BLOCK_SHARED(type, name) type& name = *static_cast<type*>(bf_host_block_shared(sizeof(type)))
#else
#define BF_BLOCK_SHARED(type, name) __shared__ type name
#endif

#if defined(BLINKFLOW_HOST_EMULATION)
#include <sched.h>
__device__ __forceinline__ long long bf_ld_relaxed_sys(const long long* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
__device__ __forceinline__ long long bf_ld_acquire_sys(const long long* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
__device__ __forceinline__ void bf_st_release_sys(long long* p, long long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
__device__ __forceinline__ int bf_ld_flag(const int* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
// A host thread that spins must let the thread it waits for run (the CPU suite runs many
// emulated GPU threads on few cores); a GPU warp spins in place.
__device__ __forceinline__ void bf_spin_pause() { sched_yield(); }
__device__ __forceinline__ uint4 bf_ld_volatile_v4(const void* p) {
    const bf_u32* q = static_cast<const bf_u32*>(p);
    uint4 v;
    v.x = __atomic_load_n(q, __ATOMIC_RELAXED);
    v.y = __atomic_load_n(q + 1, __ATOMIC_RELAXED);
    v.z = __atomic_load_n(q + 2, __ATOMIC_RELAXED);
    v.w = __atomic_load_n(q + 3, __ATOMIC_RELAXED);
    return v;
}
__device__ __forceinline__ void bf_st_v4(void* p, uint4 v) {
    bf_u32* q = static_cast<bf_u32*>(p);
    q[0] = v.x; q[1] = v.y; q[2] = v.z; q[3] = v.w;
}
template <typename W> __device__ __forceinline__ W bf_ld_volatile_word(const W* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
#else
__device__ __forceinline__ long long bf_ld_relaxed_sys(const long long* p) {
    long long v;
    asm volatile("ld.relaxed.sys.global.s64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ long long bf_ld_acquire_sys(const long long* p) {
    long long v;
    asm volatile("ld.acquire.sys.global.s64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void bf_st_release_sys(long long* p, long long v) {
    asm volatile("st.release.sys.global.s64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ int bf_ld_flag(const int* p) {
    int v;
    asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void bf_spin_pause() {}
// Slot data: a volatile load never hits a stale L1 line. No "memory" clobber: the loads of one
// unrolled group may all be in flight at once (the acquire and the barrier before them carry
// the ordering).
__device__ __forceinline__ uint4 bf_ld_volatile_v4(const void* p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
// One 16-byte store (a plain uint4 assignment from a union is split into four 32-bit ones).
__device__ __forceinline__ void bf_st_v4(void* p, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" : : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
template <typename W> __device__ __forceinline__ W bf_ld_volatile_word(const W* p) { return *reinterpret_cast<const volatile W*>(p); }
#endif

#endif  // BLINKFLOW_COMMON_CUH
