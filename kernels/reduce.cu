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
//
// Throughput: 16-byte accesses with BF_UNROLL loads of each input in flight per thread; a scalar
// path only for the misaligned head and the tail of the range (docs/cuda.md, "Keeping a link
// busy").
#include "common.cuh"

#define BF_MAX_INPUTS 8

// Vectors [0, nvec) (16 bytes each, every pointer advanced to a 16-byte boundary): each thread
// takes BF_UNROLL vectors a grid width apart and loads all of an input's before it combines any,
// so BF_UNROLL loads per input are in flight per thread (NCCL's reduceCopy unroll,
// common_kernel.h). In the last group a thread's vectors past the end are neither loaded nor
// stored.
template <typename T, int OP>
__device__ __forceinline__ void bf_reduce_vectors(T* out, T* out2, const T* const* ins, int nin, long long nvec,
                                                  long long tid, long long stride) {
    typedef BfTraits<T> Tr;
    typedef typename Tr::acc A;
    const int N = BfVec<T>::N;
    for (long long v0 = tid; v0 < nvec; v0 += BF_UNROLL * stride) {
        BfVec<T> x[BF_UNROLL];
        A acc[BF_UNROLL][BfVec<T>::N];
#pragma unroll
        for (int u = 0; u < BF_UNROLL; ++u)
            x[u].raw = v0 + u * stride < nvec ? reinterpret_cast<const uint4*>(ins[0])[v0 + u * stride] : bf_zero_v4();
#pragma unroll
        for (int u = 0; u < BF_UNROLL; ++u)
#pragma unroll
            for (int k = 0; k < N; ++k) acc[u][k] = Tr::load(x[u].e[k]);
        for (int j = 1; j < nin; ++j) {  // not unrolled: the body is already BF_UNROLL x N wide
#pragma unroll
            for (int u = 0; u < BF_UNROLL; ++u)
                if (v0 + u * stride < nvec) x[u].raw = reinterpret_cast<const uint4*>(ins[j])[v0 + u * stride];
#pragma unroll
            for (int u = 0; u < BF_UNROLL; ++u)
#pragma unroll
                for (int k = 0; k < N; ++k) acc[u][k] = BfOp<OP, T>::apply(acc[u][k], Tr::load(x[u].e[k]));
        }
#pragma unroll
        for (int u = 0; u < BF_UNROLL; ++u) {
#pragma unroll
            for (int k = 0; k < N; ++k) x[u].e[k] = Tr::store(acc[u][k]);
            if (v0 + u * stride < nvec) {
                bf_st_v4(out + (v0 + u * stride) * N, x[u].raw);
                if (out2) bf_st_v4(out2 + (v0 + u * stride) * N, x[u].raw);
            }
        }
    }
}

template <typename T, int OP>
__device__ __forceinline__ void bf_reduce_scalar(T* out, T* out2, const T* const* ins, int nin, long long i) {
    typedef BfTraits<T> Tr;
    typedef typename Tr::acc A;
    A acc = Tr::load(ins[0][i]);
#pragma unroll
    for (int j = 1; j < BF_MAX_INPUTS; ++j)
        if (j < nin) acc = BfOp<OP, T>::apply(acc, Tr::load(ins[j][i]));
    T res = Tr::store(acc);
    out[i] = res;
    if (out2) out2[i] = res;
}

template <typename T, int OP>
__global__ void blinkflow_reduce(T* out, T* out2,
                                 const T* in0, const T* in1, const T* in2, const T* in3,
                                 const T* in4, const T* in5, const T* in6, const T* in7,
                                 int nin, long long n) {
    const T* ins[BF_MAX_INPUTS] = {in0, in1, in2, in3, in4, in5, in6, in7};
    const long long stride = (long long)blockDim.x * gridDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int N = BfVec<T>::N;

    // A scalar head brings every pointer to a 16-byte boundary when they share one
    // misalignment; the vectors follow, then a scalar tail. Pointers that disagree (rare: the
    // runner's buffers and slots start 16-byte aligned) run all scalar. The pointers are
    // uniform across the grid, so no branch here diverges.
    bool same = out2 == 0 || bf_same_misalignment(out, out2);
#pragma unroll
    for (int j = 0; j < BF_MAX_INPUTS; ++j)
        if (j < nin) same = same && bf_same_misalignment(out, ins[j]);
    long long head = bf_vector_head<T>(out, same);
    if (head < 0 || head > n) head = n;
    const long long nvec = (n - head) / N, tail = head + nvec * N;
    if (nvec > 0) {
        const T* vins[BF_MAX_INPUTS];
#pragma unroll
        for (int j = 0; j < BF_MAX_INPUTS; ++j) vins[j] = j < nin ? ins[j] + head : 0;
        bf_reduce_vectors<T, OP>(out + head, out2 ? out2 + head : 0, vins, nin, nvec, tid, stride);
    }
    // The scalar head [0, head) and tail [tail, n) as one index range.
    for (long long i = tid; i < head + n - tail; i += stride)
        bf_reduce_scalar<T, OP>(out, out2, ins, nin, i < head ? i : tail + (i - head));
}
