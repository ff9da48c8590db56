// The device executor: one launch runs a set of thread blocks, each walking the steps of one
// channel (a plan tree, or a lane of one) of one rank from the tables of blinkflow/schedule/device_tables.py, encoded
// by blinkflow/backends/device_abi.py, on its own buffer (bufs + block_offsets[b]): one rank's
// blocks on its buffer, or, in the loopback mode, every virtual rank's blocks in one launch, each
// rank's buffer a row of one array. The numpy emulator
// that CI runs on every commit (blinkflow/backends/device_emulator.py, interpret_block) is this
// kernel line for line:
//
//   emulator                               kernel
//   for i in block's steps                 for (i = first; i < last; ++i)
//   wait(progress[other] >= c*stride+v)    thread 0: bf_wait(progress + other, ...)
//   wait(tail >= base + seq + 1), each in  thread 0: bf_wait(tail, ...) (relaxed polls, then an acquire)
//   wait(head >= base + send_seq+1-W)      thread 0: bf_wait(head, ...)
//   every wait polls abort[0]              bf_wait returns false once *abort is set (read every 1024 polls)
//   span = slot / combine(span, slots)     every thread: BF_UNROLL 16-byte vectors at a time
//     / copy                                 (scalar head and tail where a span is misaligned;
//                                            a reduction accumulates its inputs, rounds once)
//   slot(send) = span                      every thread: plain stores into the peer's slot
//   head/tail/progress posts               __syncthreads(); thread 0: st.release.sys
//
// Counters are int64 in peer memory (NCCL's Simple protocol): a receive connection's ring of
// `window` slots and its tail live in the receiver's memory (written by the sender), its head in
// the sender's (written by the receiver); connections to other hosts end in pinned host memory
// that the proxy thread serves. Counters never restart: call c uses sequence numbers from
// c * transfers, and progress values from c * stride.
//
// A reducing step combines all its received chunks in one pass, in the table's order, in the
// arithmetic type (float for half and bfloat16) and rounds once: the order and rounding of the
// runner's fused reduction (reduce.cu, inputs [local, in_1, in_2, ...]), so the bits are the
// runner's for every dtype.
//
// Memory ordering (PTX memory consistency model; common.cuh): thread 0 polls a counter with
// relaxed system-scope loads, then acquires it (ld.acquire.sys) and reaches __syncthreads, so
// every thread's loads of the data the counter covers come after the writer's stores. Slot
// data is read with volatile loads, so a stale L1 line is never used. Posts: every thread's
// stores of the step, __syncthreads (ordering them before thread 0), then thread 0 releases the
// counter (st.release.sys): a peer that acquires the counter sees the data. A receiver's head
// post releases its loads of the slot the same way, before the sender may overwrite it.
//
// Work: 512 threads per block (device_executor.THREADS), each with BF_UNROLL 16-byte
// loads of a source in flight before it uses any (NCCL's reduceCopy unroll, common_kernel.h),
// the 16-byte path wherever the step's pointers share one misalignment (a scalar head brings
// them to a 16-byte boundary, a scalar tail ends the span), the scalar path only when they do
// not.
//
// All blocks of a launch wait for each other (progress) and for peers' blocks, so they must be
// co-resident: the host launcher checks occupancy first (device_executor.check_co_residency).
//
// Instantiated per (dtype, op) like reduce.cu: blinkflow_interpreter<T, OP>. Calls that only move
// bytes use the SUM instantiation of a type of the element's width.
#include "common.cuh"

// Step ops; must match blinkflow.backends.device_abi.OP_CODES.
#define BF_STEP_SEND 0
#define BF_STEP_RECV 1
#define BF_STEP_RECV_REDUCE 2
#define BF_STEP_RECV_REDUCE_SEND 3
#define BF_STEP_RECV_SEND 4
#define BF_STEP_COPY 5
// Most received chunks one step combines (device_abi.MAX_STEP_INPUTS).
#define BF_MAX_STEP_INPUTS 8
// Columns of a step row and of a connection row (device_abi.STEP_* and CONN_*).
#define BF_STEP_FIELDS 11
#define BF_CONN_FIELDS 4
#define BF_CONN_SLOTS 0
#define BF_CONN_TAIL 1
#define BF_CONN_HEAD 2
#define BF_CONN_TRANSFERS 3

// Slot and buffer elements one at a time (a scalar head or tail): a volatile load of the
// element's bits (see bf_ld_volatile_v4 for why volatile).
template <int BYTES> struct BfWord;
template <> struct BfWord<1> { typedef bf_u8 type; };
template <> struct BfWord<2> { typedef bf_u16 type; };
template <> struct BfWord<4> { typedef bf_u32 type; };
template <> struct BfWord<8> { typedef bf_u64 type; };

template <typename T> __device__ __forceinline__ T bf_load_volatile(const T* p) {
    typedef typename BfWord<sizeof(T)>::type W;
    W w = bf_ld_volatile_word(reinterpret_cast<const W*>(p));
    return *reinterpret_cast<const T*>(&w);
}

// Spin until *counter >= value, then acquire it; false when the abort flag was raised first.
// The flag lives in host memory (a read crosses PCIe, a microsecond), so it is read once every
// BF_ABORT_SPINS polls of the counter, as NCCL checks its abort flag. The polls are relaxed
// (cheap, coherent); the one acquire after them orders the caller's later loads (and, through
// __syncthreads, its block's) after the stores the counter's writer released.
#define BF_ABORT_SPINS 1024
__device__ __forceinline__ bool bf_wait(const long long* counter, long long value, const int* abort) {
    int spins = 0;
    while (bf_ld_relaxed_sys(counter) < value) {
        if (++spins == BF_ABORT_SPINS) {
            spins = 0;
            if (bf_ld_flag(abort)) return false;
        }
        bf_spin_pause();
    }
    bf_ld_acquire_sys(counter);
    return true;
}

// Release: the block's accesses (ordered before this thread by the preceding __syncthreads)
// happen before any reader that acquires the counter's new value.
__device__ __forceinline__ void bf_post(long long* counter, long long value) { bf_st_release_sys(counter, value); }

// A step's operands, the same for every thread of the block.
template <typename T> struct BfStepArgs {
    int op, nin;
    const T* const* in;  // the received slots, in combination order
    T* span;             // the step's range of the block's buffer
    const T* src;        // what a copy reads (the span otherwise)
    T* out;              // the peer's slot of a sending step, or 0
};

template <typename T> __device__ __forceinline__ bool bf_reduces(const BfStepArgs<T>& a) {
    return a.nin > 0 && a.op != BF_STEP_RECV && a.op != BF_STEP_RECV_SEND;
}

// The first source a step reads: the slot of a receive, the local value of a reduction, the
// source range of a copy, the span of a send.
template <typename T> __device__ __forceinline__ const T* bf_first_source(const BfStepArgs<T>& a) {
    if (a.nin > 0 && !bf_reduces(a)) return a.in[0];
    return a.op == BF_STEP_COPY ? a.src : a.span;
}

// Element k of a step (the scalar path): a receive copies its slot, a reduction folds every
// input into the local value in the table's order and rounds once, a copy moves the source; the
// result goes to the range (unless the step only sends) and the peer's slot.
template <typename T, int OP> __device__ __forceinline__ void bf_step_scalar(const BfStepArgs<T>& a, long long k) {
    typedef BfTraits<T> Tr;
    typedef typename Tr::acc A;
    T v = bf_load_volatile(bf_first_source(a) + k);
    if (bf_reduces(a)) {
        A acc = Tr::load(v);
        for (int j = 0; j < a.nin; ++j) acc = BfOp<OP, T>::apply(acc, Tr::load(bf_load_volatile(a.in[j] + k)));
        v = Tr::store(acc);
    }
    if (a.nin > 0 || a.op == BF_STEP_COPY) a.span[k] = v;
    if (a.out != 0) a.out[k] = v;
}

// Vectors [0, nvec) of a step whose pointers (advanced past the scalar head) are all 16-byte
// aligned, the same arithmetic as bf_step_scalar. Each thread takes BF_UNROLL vectors a block
// width apart (so a warp's loads stay coalesced) and issues all BF_UNROLL loads of a source
// before it uses any: BF_UNROLL loads in flight per thread instead of one. In the last group a
// thread's vectors past the end are neither loaded nor stored.
template <typename T, int OP> __device__ __forceinline__ void bf_step_vectors(const BfStepArgs<T>& a, long long nvec) {
    typedef BfTraits<T> Tr;
    typedef typename Tr::acc A;
    const int N = BfVec<T>::N;
    const long long width = blockDim.x;
    const bool reduces = bf_reduces(a), keeps = a.nin > 0 || a.op == BF_STEP_COPY;
    const T* first = bf_first_source(a);
    for (long long v0 = threadIdx.x; v0 < nvec; v0 += BF_UNROLL * width) {
        BfVec<T> x[BF_UNROLL];
#pragma unroll
        for (int u = 0; u < BF_UNROLL; ++u)
            x[u].raw = v0 + u * width < nvec ? bf_ld_volatile_v4(first + (v0 + u * width) * N) : bf_zero_v4();
        if (reduces) {
            A acc[BF_UNROLL][BfVec<T>::N];
#pragma unroll
            for (int u = 0; u < BF_UNROLL; ++u)
#pragma unroll
                for (int e = 0; e < N; ++e) acc[u][e] = Tr::load(x[u].e[e]);
            for (int j = 0; j < a.nin; ++j) {
#pragma unroll
                for (int u = 0; u < BF_UNROLL; ++u)
                    if (v0 + u * width < nvec) x[u].raw = bf_ld_volatile_v4(a.in[j] + (v0 + u * width) * N);
#pragma unroll
                for (int u = 0; u < BF_UNROLL; ++u)
#pragma unroll
                    for (int e = 0; e < N; ++e) acc[u][e] = BfOp<OP, T>::apply(acc[u][e], Tr::load(x[u].e[e]));
            }
#pragma unroll
            for (int u = 0; u < BF_UNROLL; ++u)
#pragma unroll
                for (int e = 0; e < N; ++e) x[u].e[e] = Tr::store(acc[u][e]);
        }
#pragma unroll
        for (int u = 0; u < BF_UNROLL; ++u) {
            const long long k = (v0 + u * width) * N;
            if (v0 + u * width < nvec) {
                if (keeps) bf_st_v4(a.span + k, x[u].raw);
                if (a.out != 0) bf_st_v4(a.out + k, x[u].raw);
            }
        }
    }
}

// What a block's threads share: written by thread 0 between two barriers.
template <typename T> struct BfBlockState {
    int stop;
    long long head;  // elements of the scalar head; -1: the pointers disagree, all scalar
    const T* in_slot[BF_MAX_STEP_INPUTS];
    long long in_seq[BF_MAX_STEP_INPUTS];
};

template <typename T, int OP>
__global__ void blinkflow_interpreter(T* bufs, const long long* block_offsets, const long long* steps, const long long* inputs,
                                      const long long* waits, const long long* block_start, const long long* conns,
                                      long long* progress, const int* abort, long long call, long long window,
                                      long long slot_elems) {
    const int N = BfVec<T>::N;
    BF_BLOCK_SHARED(BfBlockState<T>, sh);
    T* buf = bufs + block_offsets[blockIdx.x];
    const long long first = block_start[blockIdx.x], last = block_start[blockIdx.x + 1];
    const long long stride = block_start[gridDim.x] + 1;  // device_abi.EncodedTables.progress_stride
    for (long long i = first; i < last; ++i) {
        const long long* s = steps + i * BF_STEP_FIELDS;
        BfStepArgs<T> a;
        a.op = (int)s[0];
        const long long offset = s[1], count = s[2], src_offset = s[3];
        const long long* in_rows = inputs + 2 * s[4];
        a.nin = (int)s[5];
        const long long send_row = s[6];
        const long long sseq = send_row >= 0 ? call * conns[send_row * BF_CONN_FIELDS + BF_CONN_TRANSFERS] + s[7] : 0;
        a.span = buf + offset;
        a.src = a.op == BF_STEP_COPY ? buf + src_offset : a.span;
        a.out = send_row >= 0
            ? reinterpret_cast<T*>(conns[send_row * BF_CONN_FIELDS + BF_CONN_SLOTS]) + (sseq % window) * slot_elems
            : 0;
        // 1-3: every wait before any work, by one thread; it also finds the scalar head that
        // brings every pointer of the step to a 16-byte boundary (the same for the whole block).
        if (threadIdx.x == 0) {
            bool ok = true;
            bool same = bf_same_misalignment(a.span, a.src) && (a.out == 0 || bf_same_misalignment(a.span, a.out));
            for (long long w = s[8]; ok && w < s[8] + s[9]; ++w)
                ok = bf_wait(progress + waits[2 * w], call * stride + waits[2 * w + 1], abort);
            for (int j = 0; ok && j < a.nin; ++j) {
                const long long* c = conns + in_rows[2 * j] * BF_CONN_FIELDS;
                const long long seq = call * c[BF_CONN_TRANSFERS] + in_rows[2 * j + 1];
                sh.in_seq[j] = seq;
                sh.in_slot[j] = reinterpret_cast<const T*>(c[BF_CONN_SLOTS]) + (seq % window) * slot_elems;
                same = same && bf_same_misalignment(a.span, sh.in_slot[j]);
                ok = bf_wait(reinterpret_cast<const long long*>(c[BF_CONN_TAIL]), seq + 1, abort);
            }
            if (ok && send_row >= 0)
                ok = bf_wait(reinterpret_cast<const long long*>(conns[send_row * BF_CONN_FIELDS + BF_CONN_HEAD]),
                             sseq + 1 - window, abort);
            sh.stop = ok ? 0 : 1;
            sh.head = bf_vector_head<T>(a.span, same);
        }
        __syncthreads();
        if (sh.stop) return;  // aborted: the host reports what the call waited for
        a.in = sh.in_slot;
        // 4: the work, spread over the block's threads: a scalar head, 16-byte vectors, a
        // scalar tail (or all scalar when the pointers' misalignments differ).
        const long long head = sh.head < 0 ? count : (sh.head < count ? sh.head : count);
        const long long nvec = (count - head) / N;
        const long long tail = head + nvec * N;
        if (nvec > 0) {
            BfStepArgs<T> v = a;
            const T* in_v[BF_MAX_STEP_INPUTS];
            for (int j = 0; j < a.nin; ++j) in_v[j] = a.in[j] + head;
            v.in = in_v;
            v.span = a.span + head;
            v.src = a.src + head;
            v.out = a.out != 0 ? a.out + head : 0;
            bf_step_vectors<T, OP>(v, nvec);
        }
        // The scalar head [0, head) and tail [tail, count) as one index range.
        for (long long k = threadIdx.x; k < head + count - tail; k += blockDim.x)
            bf_step_scalar<T, OP>(a, k < head ? k : tail + (k - head));
        __syncthreads();
        // 5: the posts, after the block's accesses.
        if (threadIdx.x == 0) {
            for (int j = 0; j < a.nin; ++j)
                bf_post(reinterpret_cast<long long*>(conns[in_rows[2 * j] * BF_CONN_FIELDS + BF_CONN_HEAD]), sh.in_seq[j] + 1);
            if (send_row >= 0)
                bf_post(reinterpret_cast<long long*>(conns[send_row * BF_CONN_FIELDS + BF_CONN_TAIL]), sseq + 1);
            if (s[10]) bf_post(progress + blockIdx.x, call * stride + (i - first) + 1);
        }
    }
}
