"""CudaBackend on N ranks sharing the GPUs here (tests/gpu/test_cuda_backend.py), or on the fake
CuPy (tests/mpi/test_cuda_backend_fake_cupy.py). A case script of the harness (tests/harness.py).

argv: SCHEDULE HOSTS ALGORITHM [CASE ...]   (ALGORITHM: auto (the policy's choice: the runner),
device or runner, as BLINKFLOW_ALGORITHM; SCHEDULE "chain" = hand-made chain schedules across all ranks (and
one-hop all-gather / reduce-scatter), "plan" = the planner's lowered trees for the first GPUs
of each host of an HGX H100 (cluster); HOSTS > 1 splits the ranks into that many pretend hosts:
transfers between them go over MPI, and "plan" runs the three-phase all-reduce. HOSTS may also
list uneven host sizes, "2+1": then the receive-slot arena is small enough that a host's size
would change the chunk, which every rank must still agree on.)

Every rank derives every rank's input from a seed, so each checks the result against numpy
itself; then all ranks compare result digests to prove they are bitwise identical.
"""
import functools
import hashlib
import os
import sys

import cupy
import numpy as np
from mpi4py import MPI

from blinkflow.backends.base import BackendContext, Layout
from blinkflow.backends.cuda import CudaBackend
from blinkflow.config import Config
from blinkflow.errors import PlanError
from blinkflow.ops import ReduceOp
from blinkflow.schedule import policy
from blinkflow.bench.hand_schedules import (chain_allreduce_schedule, chain_broadcast_schedule, direct_allgather_schedule,
                                       direct_reducescatter_schedule)
from harness import run_cases, skip

SCHEDULE, HOSTS_ARG = sys.argv[1], sys.argv[2]
ALGORITHM = sys.argv[3]
comm = MPI.COMM_WORLD
n, me = comm.size, comm.rank
SIZES = [int(s) for s in HOSTS_ARG.split("+")] if "+" in HOSTS_ARG else [n // int(HOSTS_ARG)] * int(HOSTS_ARG)
HOSTS = len(SIZES)
HOST_OF = tuple(h for h, size in enumerate(SIZES) for _ in range(size))
local = comm.Split(HOST_OF[me], key=me)
cross = comm.Split(local.rank, key=me)
if SCHEDULE == "plan":  # the first GPUs of each host of an HGX H100 cluster
    from blinkflow.topology.presets import get_preset

    TOPOLOGY = get_preset(f"{HOSTS}xhgx-h100" if HOSTS > 1 else "hgx-h100")
    DEVICES = tuple(d for h, size in zip(TOPOLOGY.hosts, SIZES) for d in TOPOLOGY.compute_on_host(h)[:size])
else:
    DEVICES = tuple(range(n))  # virtual device ids; the ranks share the physical GPU(s)
LAYOUT = Layout(me, HOST_OF, DEVICES)
UNEVEN = len(set(SIZES)) > 1
# Small chunks: many pipeline steps and slot reuse even on small buffers; uneven hosts: chunks
# capped by a small arena instead.
CHUNK_BYTES = 1 << 20 if UNEVEN else 4096


def _shards(shard_counts):
    at, out = 0, []
    for d in DEVICES:
        out.append((d, at, shard_counts[d]))
        at += shard_counts[d]
    return tuple(out)


def chain_schedule_for(collective, root_device, nelems, chunk_elems, shard_counts=None):
    if collective == "allreduce":
        return chain_allreduce_schedule(DEVICES, nelems, chunk_elems, nchannels=min(2, len(DEVICES)))
    if collective == "broadcast":
        return chain_broadcast_schedule(DEVICES, root_device, nelems, chunk_elems)
    if collective == "allgather":
        return direct_allgather_schedule(DEVICES, _shards(shard_counts), nelems, chunk_elems)
    if collective == "reducescatter":
        return direct_reducescatter_schedule(DEVICES, _shards(shard_counts), nelems, chunk_elems)
    raise PlanError(f"no hand-made schedule for {collective}")


@functools.lru_cache(maxsize=None)
def backend():
    """The backend every case uses, made by the first (a failure to make it ends the job)."""
    config = Config(chunk_bytes=CHUNK_BYTES, algorithm=ALGORITHM)
    ctx = BackendContext(comm=comm, local_comm=local, cross_comm=cross, layout=LAYOUT, topology=None,
                         plan_for=None, config=config)
    kwargs = {"nslots": 2, "arena_bytes": (64 << 10) if UNEVEN else (4 << 20)}  # small: many slot reuses
    if SCHEDULE == "chain":
        kwargs["schedule_for"] = chain_schedule_for
    else:
        from blinkflow.planner import make_plan

        ctx.topology = TOPOLOGY
        ctx.plan_for = lambda collective, root=None: make_plan(TOPOLOGY, collective, devices=list(DEVICES), root=root)
    return CudaBackend(ctx, **kwargs)


def inputs(seed, dtype, size, op):
    rng = np.random.default_rng(seed)
    if op is ReduceOp.PRODUCT:
        vals = rng.choice([1, 2, 3] if dtype == "uint8" else [-1, 1, 2], size=size)
    elif dtype == "uint8":
        vals = rng.integers(0, 255, size=size)
    else:
        vals = rng.integers(-40, 40, size=size)
    return vals.astype(dtype)


FN = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.PRODUCT: np.multiply}
ALGORITHMS = set()  # what the policy chose for the all-reduces (one rank runs none)


def check(name, got, want):
    """Equal to the numpy reference (integers and sums of small whole numbers: exactly), and
    the same bytes on every rank (but for results that differ by rank, named "per-rank")."""
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:5]
        raise AssertionError(f"{name}: first mismatches at {bad.tolist()}: got {got[bad]} want {want[bad]}")
    digest = hashlib.sha256(got.tobytes()).hexdigest()
    assert len(set(comm.allgather(digest))) == 1 or "per-rank" in name, f"{name}: results differ across ranks"


DTYPES = ("float32", "float16", "float64", "int32", "int64", "uint8")
#: "all" (the default: the GPU tier) or "diagonal:K": dtype i of DTYPES with op (i + K) mod 4 of
#: FN alone, so that four configurations with K = 0..3 meet every pair (the kernels' dtype and op
#: are independent of the schedule; the fake CuPy's suite runs the whole matrix on the three-phase
#: configurations and the diagonals elsewhere, at every size).
DTYPE_OPS = os.environ.get("TESTS_DTYPE_OPS", "all")


def dtype_op_pairs():
    ops = list(FN)
    if DTYPE_OPS == "all":
        return [(d, o) for d in DTYPES for o in ops]
    offset = int(DTYPE_OPS.partition(":")[2])
    return [(d, ops[(i + offset) % len(ops)]) for i, d in enumerate(DTYPES)]


def case_allreduce_of_every_dtype_op_and_size(rank, size):
    sizes = [1, n - 1 if n > 1 else 1, 1000, 3 * 4096 + 17, 100003]
    for call, (dtype, op) in enumerate(dtype_op_pairs()):
        for nelems in sizes:
            seed = lambda r: hash((call, nelems, r)) % 2**32  # noqa: E731
            host = [inputs(seed(r), dtype, nelems, op) for r in range(n)]
            want = host[0].copy()
            for h in host[1:]:
                want = FN[op](want, h)
            buf = cupy.asarray(host[me])
            backend().allreduce(buf, op)
            if backend().last_choice is not None:
                ALGORITHMS.add(backend().last_choice.algorithm)
            check(f"allreduce {dtype} {op.name} size {nelems}", cupy.asnumpy(buf), want)


def case_the_policy_ran_the_algorithm_asked_for(rank, size):
    if n == 1:
        skip("one rank moves no data: no algorithm runs")
    if ALGORITHM == "auto":
        skip("BLINKFLOW_ALGORITHM=auto: the policy chooses, nothing was asked for")
    assert ALGORITHMS == {ALGORITHM}, f"the all-reduces ran on {sorted(ALGORITHMS)}, BLINKFLOW_ALGORITHM={ALGORITHM}"


def case_the_policy_is_asked_once_per_call_shape(rank, size):
    """The algorithm and chunk of an all-reduce are decided at its shape's first call; later
    calls of the shape run what was decided, without asking the policy again."""
    if n == 1:
        skip("one rank moves no data: nothing is decided")
    asked = []
    choose = policy.choose

    def counting(collective, nbytes, *args, **kwargs):
        asked.append((collective, nbytes))
        return choose(collective, nbytes, *args, **kwargs)

    shapes = (777, 4321)
    for nelems in shapes:   # the first call of each shape decides it
        backend().allreduce(cupy.asarray(inputs(3 + me, "float32", nelems, ReduceOp.SUM)), ReduceOp.SUM)
    policy.choose = counting
    try:
        for _ in range(3):
            for nelems in shapes:
                buf = cupy.asarray(inputs(5 + me, "float32", nelems, ReduceOp.SUM))
                backend().allreduce(buf, ReduceOp.SUM)
                check(f"allreduce of {nelems} again", cupy.asnumpy(buf),
                      sum(inputs(5 + r, "float32", nelems, ReduceOp.SUM) for r in range(n)))
    finally:
        policy.choose = choose
    assert asked == [], f"the policy was asked again for shapes it had decided: {asked}"


def case_average_is_the_pieces_reduced_with_the_factors_folded_in(rank, size):
    """As the runtime does it (Executor._allreduce): a batch's tensors as pieces, prescaled, and
    the Average's factor applied to the result, which lands in a private array."""
    sizes = (3, 4000, 0, 997)
    mine = [cupy.asarray(inputs(7 + me * 10 + i, "float32", k, ReduceOp.SUM)) for i, k in enumerate(sizes)]
    out = cupy.empty(sum(sizes), np.float32)
    backend().allreduce_pieces(mine, ReduceOp.SUM, out=out, scale=1.0 / n, prescale=2.0)
    want = sum(np.concatenate([inputs(7 + r * 10 + i, "float32", k, ReduceOp.SUM) for i, k in enumerate(sizes)]) * 2
               for r in range(n)).astype(np.float32)
    check("average of pieces", cupy.asnumpy(out), want * np.float32(1.0 / n))
    for piece, k, i in zip(mine, sizes, range(len(sizes))):  # the inputs are only read
        check(f"piece {i} per-rank", cupy.asnumpy(piece), inputs(7 + me * 10 + i, "float32", k, ReduceOp.SUM))


def case_the_fusion_buffer_is_reused_across_sizes(rank, size):
    """The fusion buffer comes from the backend."""
    for nelems in (10, 70000, 20):
        fused = backend().buffer(nelems, np.float32)
        fused[...] = cupy.asarray(inputs(11 + me, "float32", nelems, ReduceOp.SUM))
        backend().allreduce(fused, ReduceOp.SUM)
        check(f"fusion buffer {nelems}", cupy.asnumpy(fused),
              sum(inputs(11 + r, "float32", nelems, ReduceOp.SUM) for r in range(n)))


def case_broadcast_from_every_root(rank, size):
    for root in range(n):
        buf = cupy.asarray(inputs(20 + me, "float64", 9001, ReduceOp.SUM))
        backend().broadcast(buf, root)
        check(f"broadcast root {root}", cupy.asnumpy(buf), inputs(20 + root, "float64", 9001, ReduceOp.SUM))


def case_allgather_of_uneven_counts(rank, size):
    counts = [3 * r + 1 for r in range(n)]  # uneven, like allgather of ragged first dimensions
    send = cupy.asarray(inputs(30 + me, "int32", counts[me], ReduceOp.SUM))
    recv = cupy.zeros(sum(counts), dtype=cupy.int32)
    backend().allgather(send, recv, counts)
    check("allgather", cupy.asnumpy(recv),
          np.concatenate([inputs(30 + r, "int32", counts[r], ReduceOp.SUM) for r in range(n)]))


def case_reducescatter(rank, size):
    counts = [5000 // n + (1 if r < 5000 % n else 0) for r in range(n)]
    send = cupy.asarray(inputs(40 + me, "float32", 5000, ReduceOp.SUM))
    recv = cupy.zeros(counts[me], dtype=cupy.float32)
    backend().reducescatter(send, recv, counts, ReduceOp.SUM)
    total = sum(inputs(40 + r, "float32", 5000, ReduceOp.SUM) for r in range(n))
    off = sum(counts[:me])
    check("reducescatter per-rank", cupy.asnumpy(recv), total[off:off + counts[me]])


def case_alltoall(rank, size):
    send_counts = [r + 1 for r in range(n)]
    send = cupy.asarray(np.concatenate([np.full(c, 100 * me + q, np.int64) for q, c in enumerate(send_counts)]))
    recv_counts = [me + 1] * n
    recv = cupy.zeros(sum(recv_counts), dtype=cupy.int64)
    backend().alltoall(send, send_counts, recv, recv_counts)
    check("alltoall per-rank", cupy.asnumpy(recv),
          np.concatenate([np.full(me + 1, 100 * q + me, np.int64) for q in range(n)]))


def case_close_is_safe_twice(rank, size):
    backend().close()
    backend().close()


if __name__ == "__main__":
    run_cases(globals(), me, n, only=sys.argv[4:])
