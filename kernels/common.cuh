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

#endif  // BLINKFLOW_COMMON_CUH
