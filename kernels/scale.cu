// Scale in place or out of place: out = in * factor (Horovod's Average, prescale, postscale).
//
// Semantics match blinkflow.backends.base.Backend.scale so the CPU and GPU backends agree, and
// Horovod's arithmetic: float and half multiply by the factor rounded to float (the host passes
// it; half through float with one rounding), bfloat16 by the factor rounded to bfloat16, double
// in double; integer buffers multiply in double and truncate toward zero.
//
// Instantiated through CuPy name_expressions: blinkflow_scale<T> for every supported dtype.
#include "common.cuh"

template <typename T> struct BfScale {
    static __device__ __forceinline__ T apply(T v, double f) {
        return (T)((double)v * f);  // integers: double product truncated toward zero
    }
};
template <> struct BfScale<float> {
    static __device__ __forceinline__ float apply(float v, double f) { return v * (float)f; }
};
template <> struct BfScale<double> {
    static __device__ __forceinline__ double apply(double v, double f) { return v * f; }
};
template <> struct BfScale<bf_half> {
    static __device__ __forceinline__ bf_half apply(bf_half v, double f) {
        return BfTraits<bf_half>::store(BfTraits<bf_half>::load(v) * (float)f);
    }
};
template <> struct BfScale<bf_bfloat16> {
    static __device__ __forceinline__ bf_bfloat16 apply(bf_bfloat16 v, double f) {
        return BfTraits<bf_bfloat16>::store(BfTraits<bf_bfloat16>::load(v) * (float)f);
    }
};

template <typename T>
__global__ void blinkflow_scale(T* out, const T* in, double factor, long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (bf_aligned16(out) && bf_aligned16(in)) {
        const int N = BfVec<T>::N;
        const long long nvec = n / N;
        for (long long v = tid; v < nvec; v += stride) {
            BfVec<T> x;
            x.raw = reinterpret_cast<const uint4*>(in)[v];
#pragma unroll
            for (int k = 0; k < N; ++k) x.e[k] = BfScale<T>::apply(x.e[k], factor);
            reinterpret_cast<uint4*>(out)[v] = x.raw;
        }
        done = nvec * N;
    }
    for (long long i = done + tid; i < n; i += stride) out[i] = BfScale<T>::apply(in[i], factor);
}
