// Fused elementwise reduction: out = op(in0, in1, ..., in{nin-1}), optionally also written to out2.
//
// Blink (MLSys 2020, §4.2) fuses the reduction of a chunk with forwarding it up the tree: a
// `recv_reduce_send` step reads the local chunk and the child's chunk (in a receive slot) and
// writes the combined chunk both into the local buffer (out) and straight into the parent's
// receive slot over NVLink/IPC (out2), so the data crosses memory once instead of twice.
//
// Instantiated per (dtype, op) through CuPy name_expressions: blinkflow_reduce<T, OP>, with
// T in {bf_half, bf_bfloat16, float, double, int, long long, bf_u8} and OP one of BF_OP_*.
// Half and bfloat16 accumulate in float and round once at the end.
#include "common.cuh"

#define BF_MAX_INPUTS 8

template <typename T, int OP>
__global__ void blinkflow_reduce(T* out, T* out2,
                                 const T* in0, const T* in1, const T* in2, const T* in3,
                                 const T* in4, const T* in5, const T* in6, const T* in7,
                                 int nin, long long n) {
    typedef BfTraits<T> Tr;
    typedef typename Tr::acc A;
    const T* ins[BF_MAX_INPUTS] = {in0, in1, in2, in3, in4, in5, in6, in7};
    const long long stride = (long long)blockDim.x * gridDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;

    bool aligned = bf_aligned16(out) && (out2 == 0 || bf_aligned16(out2));
#pragma unroll
    for (int j = 0; j < BF_MAX_INPUTS; ++j)
        if (j < nin) aligned = aligned && bf_aligned16(ins[j]);

    long long done = 0;
    if (aligned) {
        // 16-byte vector loads; pointers are uniform across the grid, so this branch never diverges.
        const int N = BfVec<T>::N;
        const long long nvec = n / N;
        for (long long v = tid; v < nvec; v += stride) {
            BfVec<T> acc_in, x;
            acc_in.raw = reinterpret_cast<const uint4*>(ins[0])[v];
            A acc[BfVec<T>::N];
#pragma unroll
            for (int k = 0; k < N; ++k) acc[k] = Tr::load(acc_in.e[k]);
#pragma unroll
            for (int j = 1; j < BF_MAX_INPUTS; ++j) {
                if (j < nin) {
                    x.raw = reinterpret_cast<const uint4*>(ins[j])[v];
#pragma unroll
                    for (int k = 0; k < N; ++k) acc[k] = BfOp<OP, T>::apply(acc[k], Tr::load(x.e[k]));
                }
            }
            BfVec<T> res;
#pragma unroll
            for (int k = 0; k < N; ++k) res.e[k] = Tr::store(acc[k]);
            reinterpret_cast<uint4*>(out)[v] = res.raw;
            if (out2) reinterpret_cast<uint4*>(out2)[v] = res.raw;
        }
        done = nvec * N;
    }
    // Scalar tail (or everything, when some pointer is not 16-byte aligned).
    for (long long i = done + tid; i < n; i += stride) {
        A acc = Tr::load(ins[0][i]);
#pragma unroll
        for (int j = 1; j < BF_MAX_INPUTS; ++j)
            if (j < nin) acc = BfOp<OP, T>::apply(acc, Tr::load(ins[j][i]));
        T res = Tr::store(acc);
        out[i] = res;
        if (out2) out2[i] = res;
    }
}
