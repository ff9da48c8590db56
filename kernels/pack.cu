// Fusion-buffer pack and unpack (Horovod's fusion buffer, done on the GPU in one launch).
//
// pack:   dst[offsets[t] : offsets[t+1]] = srcs[t][0 : offsets[t+1]-offsets[t]]   for every t
// unpack: dsts[t][0 : ...] = src[offsets[t] : offsets[t+1]]
// ``ptrs`` (device array of tensor addresses) and ``offsets`` (ntensors+1 element offsets) are
// uploaded by the host. blockIdx.y walks the tensors (grid-stride, so more than 65535 tensors
// work), blockIdx.x/threadIdx.x the elements. The copy is dtype-agnostic: instantiated per
// element width W in {bf_u8, bf_u16, bf_u32, bf_u64} through CuPy name_expressions.
#include "common.cuh"

template <typename W>
__device__ __forceinline__ void bf_copy_span(W* dst, const W* src, long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long done = 0;
    if (bf_aligned16(dst) && bf_aligned16(src)) {
        const long long nvec = n / BfVec<W>::N;
        for (long long v = tid; v < nvec; v += stride)
            reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
        done = nvec * BfVec<W>::N;
    }
    for (long long i = done + tid; i < n; i += stride) dst[i] = src[i];
}

template <typename W>
__global__ void blinkflow_pack(W* dst, const bf_u64* srcs, const long long* offsets, int ntensors) {
    for (int t = blockIdx.y; t < ntensors; t += gridDim.y) {
        const long long begin = offsets[t];
        bf_copy_span<W>(dst + begin, reinterpret_cast<const W*>(srcs[t]), offsets[t + 1] - begin);
    }
}

template <typename W>
__global__ void blinkflow_unpack(const W* src, const bf_u64* dsts, const long long* offsets, int ntensors) {
    for (int t = blockIdx.y; t < ntensors; t += gridDim.y) {
        const long long begin = offsets[t];
        bf_copy_span<W>(reinterpret_cast<W*>(dsts[t]), src + begin, offsets[t + 1] - begin);
    }
}
