// The device executor: one launch runs a set of thread blocks, each walking the steps of one
// channel (a plan tree) of one rank from the tables of blinkflow/schedule/device_tables.py, encoded
// by blinkflow/backends/device_abi.py, on its own buffer (bufs + block_offsets[b]): one rank's
// blocks on its buffer, or, in the loopback mode, every virtual rank's blocks in one launch, each
// rank's buffer a row of one array. The numpy emulator
// that CI runs on every commit (blinkflow/backends/device_emulator.py, interpret_block) is this
// kernel line for line:
//
//   emulator                               kernel
//   for i in block's steps                 for (i = first; i < last; ++i)
//   wait(progress[other] >= c*stride+v)    thread 0: bf_wait(progress + other, ...)
//   wait(tail >= base + seq + 1), each in  thread 0: bf_wait(tail, ...) (acquire: volatile load)
//   wait(head >= base + send_seq+1-W)      thread 0: bf_wait(head, ...)
//   every wait polls abort[0]              bf_wait returns false once *abort is set (read every 1024 polls)
//   span = slot / combine(span, slots)     every thread: elements k, k + blockDim.x, ...
//     / copy                                 (a reduction accumulates its inputs, rounds once)
//   slot(send) = span                      every thread: plain stores into the peer's slot
//   head/tail/progress posts               __syncthreads(); thread 0: __threadfence_system(), volatile store
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
// Slot data written by a peer (or the proxy) is read with volatile loads, so a stale L1 line
// is never used; it is read only after the tail that covers it was seen (thread 0's volatile
// load, then __syncthreads). Posts: every thread's stores of the step, __syncthreads (ordering
// them before thread 0 in the block), then thread 0's __threadfence_system() and a volatile
// store of the counter: a peer that sees the counter sees the data.
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

template <int BYTES> struct BfWord;
template <> struct BfWord<1> { typedef bf_u8 type; };
template <> struct BfWord<2> { typedef bf_u16 type; };
template <> struct BfWord<4> { typedef bf_u32 type; };
template <> struct BfWord<8> { typedef bf_u64 type; };

// Every element the interpreter reads may have been written by another GPU, the host (the proxy)
// or another block of this launch after a counter said so; the L1 cache is not coherent with
// those writers, so every read is a volatile load of the element's bits (it bypasses stale L1
// lines), 16 bytes at a time where a step's pointers allow.
template <typename T> __device__ __forceinline__ T bf_load_volatile(const T* p) {
    typedef typename BfWord<sizeof(T)>::type W;
    W w = *reinterpret_cast<const volatile W*>(p);
    return *reinterpret_cast<const T*>(&w);
}

__device__ __forceinline__ uint4 bf_load_volatile_v4(const void* p) {
    uint4 v;
#if defined(BLINKFLOW_HOST_EMULATION)
    const volatile unsigned int* q = reinterpret_cast<const volatile unsigned int*>(p);
    v.x = q[0]; v.y = q[1]; v.z = q[2]; v.w = q[3];
#else
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
#endif
    return v;
}

// Spin until *counter >= value; false when the abort flag was raised first. The flag lives in
// host memory (a read crosses PCIe, a microsecond), so it is read once every BF_ABORT_SPINS polls
// of the counter (device memory, or host memory the proxy writes), as NCCL checks its abort flag.
#define BF_ABORT_SPINS 1024
__device__ __forceinline__ bool bf_wait(const long long* counter, long long value, const volatile int* abort) {
    const volatile long long* c = counter;
    int spins = 0;
    while (*c < value) {
        if (++spins == BF_ABORT_SPINS) {
            spins = 0;
            if (*abort) return false;
        }
    }
    return true;
}

// Release: the block's stores (ordered before this thread by the preceding __syncthreads) become
// visible system-wide before the counter does.
__device__ __forceinline__ void bf_post(long long* counter, long long value) {
    __threadfence_system();
    *reinterpret_cast<volatile long long*>(counter) = value;
}

// One step's data movement on elements [k0, k0 + n) of its range, the same arithmetic whether the
// caller hands it a 16-byte vector's worth (N elements) or one element: a receive copies its slot,
// a reduction folds every input into the local value in the table's order and rounds once, a copy
// moves the source range; the result goes to the range (unless the step only sends) and the
// peer's slot.
template <typename T, int OP, int N>
__device__ __forceinline__ void bf_step_elems(int op, int nin, const T* const* in, T* span, const T* src, T* out,
                                              long long k0) {
    typedef BfTraits<T> Tr;
    typedef typename Tr::acc A;
    BfVec<T> r;
    if (N == BfVec<T>::N) {
        if (nin > 0 && (op == BF_STEP_RECV || op == BF_STEP_RECV_SEND)) {
            r.raw = bf_load_volatile_v4(in[0] + k0);
        } else if (nin > 0) {
            BfVec<T> x;
            x.raw = bf_load_volatile_v4(span + k0);
            A acc[N];
#pragma unroll
            for (int e = 0; e < N; ++e) acc[e] = Tr::load(x.e[e]);
            for (int j = 0; j < nin; ++j) {
                x.raw = bf_load_volatile_v4(in[j] + k0);
#pragma unroll
                for (int e = 0; e < N; ++e) acc[e] = BfOp<OP, T>::apply(acc[e], Tr::load(x.e[e]));
            }
#pragma unroll
            for (int e = 0; e < N; ++e) r.e[e] = Tr::store(acc[e]);
        } else {
            r.raw = bf_load_volatile_v4((op == BF_STEP_COPY ? src : span) + k0);
        }
        if (nin > 0 || op == BF_STEP_COPY) *reinterpret_cast<uint4*>(span + k0) = r.raw;
        if (out != 0) *reinterpret_cast<uint4*>(out + k0) = r.raw;
    } else {
        T v;
        if (nin > 0 && (op == BF_STEP_RECV || op == BF_STEP_RECV_SEND)) {
            v = bf_load_volatile(in[0] + k0);
        } else if (nin > 0) {
            A acc = Tr::load(bf_load_volatile(span + k0));
            for (int j = 0; j < nin; ++j) acc = BfOp<OP, T>::apply(acc, Tr::load(bf_load_volatile(in[j] + k0)));
            v = Tr::store(acc);
        } else {
            v = bf_load_volatile((op == BF_STEP_COPY ? src : span) + k0);
        }
        if (nin > 0 || op == BF_STEP_COPY) span[k0] = v;
        if (out != 0) out[k0] = v;
    }
}

template <typename T, int OP>
__global__ void blinkflow_interpreter(T* bufs, const long long* block_offsets, const long long* steps, const long long* inputs,
                                      const long long* waits, const long long* block_start, const long long* conns,
                                      long long* progress, const int* abort_flag, long long call, long long window,
                                      long long slot_elems) {
    const int N = BfVec<T>::N;
    __shared__ int stop;
    __shared__ int vector;
    __shared__ const T* in_slot[BF_MAX_STEP_INPUTS];
    __shared__ long long in_seq[BF_MAX_STEP_INPUTS];
    const volatile int* abort = abort_flag;
    T* buf = bufs + block_offsets[blockIdx.x];
    const long long first = block_start[blockIdx.x], last = block_start[blockIdx.x + 1];
    const long long stride = block_start[gridDim.x] + 1;  // device_abi.EncodedTables.progress_stride
    if (threadIdx.x == 0) stop = 0;
    __syncthreads();
    for (long long i = first; i < last; ++i) {
        const long long* s = steps + i * BF_STEP_FIELDS;
        const int op = (int)s[0];
        const long long offset = s[1], count = s[2], src_offset = s[3];
        const long long* in_rows = inputs + 2 * s[4];
        const int nin = (int)s[5];
        const long long send_row = s[6];
        const long long sseq = send_row >= 0 ? call * conns[send_row * BF_CONN_FIELDS + BF_CONN_TRANSFERS] + s[7] : 0;
        T* span = buf + offset;
        const T* src = op == BF_STEP_COPY ? buf + src_offset : span;
        T* out = send_row >= 0
            ? reinterpret_cast<T*>(conns[send_row * BF_CONN_FIELDS + BF_CONN_SLOTS]) + (sseq % window) * slot_elems
            : 0;
        // 1-3: every wait before any work, by one thread; it also decides whether every pointer
        // of the step allows 16-byte accesses (the same answer for the whole block).
        if (threadIdx.x == 0) {
            bool ok = true;
            bool aligned = bf_aligned16(span) && bf_aligned16(src) && (out == 0 || bf_aligned16(out));
            for (long long w = s[8]; ok && w < s[8] + s[9]; ++w)
                ok = bf_wait(progress + waits[2 * w], call * stride + waits[2 * w + 1], abort);
            for (int j = 0; ok && j < nin; ++j) {
                const long long* c = conns + in_rows[2 * j] * BF_CONN_FIELDS;
                const long long seq = call * c[BF_CONN_TRANSFERS] + in_rows[2 * j + 1];
                in_seq[j] = seq;
                in_slot[j] = reinterpret_cast<const T*>(c[BF_CONN_SLOTS]) + (seq % window) * slot_elems;
                aligned = aligned && bf_aligned16(in_slot[j]);
                ok = bf_wait(reinterpret_cast<const long long*>(c[BF_CONN_TAIL]), seq + 1, abort);
            }
            if (ok && send_row >= 0)
                ok = bf_wait(reinterpret_cast<const long long*>(conns[send_row * BF_CONN_FIELDS + BF_CONN_HEAD]),
                             sseq + 1 - window, abort);
            stop = ok ? 0 : 1;
            vector = aligned ? 1 : 0;
        }
        __syncthreads();
        if (stop) return;  // aborted: the host reports what the call waited for
        // 4: the work, spread over the block's threads: 16-byte vectors, then a scalar tail.
        long long done = 0;
        if (vector) {
            const long long nvec = count / N;
            for (long long v = threadIdx.x; v < nvec; v += blockDim.x)
                bf_step_elems<T, OP, BfVec<T>::N>(op, nin, in_slot, span, src, out, v * N);
            done = nvec * N;
        }
        for (long long k = done + threadIdx.x; k < count; k += blockDim.x)
            bf_step_elems<T, OP, 1>(op, nin, in_slot, span, src, out, k);
        __syncthreads();
        // 5: the posts, after the block's stores.
        if (threadIdx.x == 0) {
            for (int j = 0; j < nin; ++j)
                bf_post(reinterpret_cast<long long*>(conns[in_rows[2 * j] * BF_CONN_FIELDS + BF_CONN_HEAD]), in_seq[j] + 1);
            if (send_row >= 0)
                bf_post(reinterpret_cast<long long*>(conns[send_row * BF_CONN_FIELDS + BF_CONN_TAIL]), sseq + 1);
            if (s[10]) bf_post(progress + blockIdx.x, call * stride + (i - first) + 1);
        }
    }
}
