"""Run under mpirun by tests/mpi/test_device_executor_fake_cupy.py: the cuda backend's device
executor against its host-driven runner, bitwise, on the planner's trees of an HGX H100 (and of
two pretend hosts: the three-phase all-reduce, network edges through the proxy thread).

argv: HOSTS

Two backends on the same ranks: one with BLINKFLOW_ALGORITHM=runner, one with
BLINKFLOW_ALGORITHM=device. Every collective runs on both with random floats (sums in
different orders, or rounded at other points, would differ in their last bits) and the results
must be the same bytes, float16 sums included (where a tree node folds several children in one
pass, both round once). The timeline names the algorithm of every call. Then one rank skips a call: the others' launches
must end with a BackendError within the deadline, never hang.
"""
import sys

import cupy
import numpy as np
from mpi4py import MPI

from blinkflow.backends.base import BackendContext, Layout
from blinkflow.backends.cuda import CudaBackend
from blinkflow.config import Config
from blinkflow.errors import BackendError
from blinkflow.ops import ReduceOp
from blinkflow.planner import make_plan
from blinkflow.topology.presets import get_preset

HOSTS = int(sys.argv[1])
comm = MPI.COMM_WORLD
n, me = comm.size, comm.rank
HOST_OF = tuple(r * HOSTS // n for r in range(n))
local = comm.Split(HOST_OF[me], key=me)
cross = comm.Split(local.rank, key=me)
TOPOLOGY = get_preset(f"{HOSTS}xhgx-h100" if HOSTS > 1 else "hgx-h100")
SIZES = [HOST_OF.count(h) for h in range(HOSTS)]
DEVICES = tuple(d for h, size in zip(TOPOLOGY.hosts, SIZES) for d in TOPOLOGY.compute_on_host(h)[:size])


class Timeline:
    """Records the phases a backend marks."""

    def __init__(self):
        self.phases = []

    def start(self, category, phase):
        self.phases.append(phase)

    def end(self, category, phase):
        pass


def make_backend(algorithm, timeout=60.0):
    config = Config(chunk_bytes=2048, algorithm=algorithm)
    ctx = BackendContext(comm=comm, local_comm=local, cross_comm=cross, layout=Layout(me, HOST_OF, DEVICES),
                         topology=TOPOLOGY, config=config,
                         plan_for=lambda collective, root=None: make_plan(TOPOLOGY, collective, devices=list(DEVICES),
                                                                          root=root))
    ctx.timeline = Timeline()
    return CudaBackend(ctx, nslots=2, arena_bytes=4 << 20, device_timeout=timeout)


runner, device = make_backend("runner"), make_backend("device")
failures = []


def floats(seed, dtype, size):
    return (np.random.default_rng(seed).standard_normal(size) * 100).astype(dtype)


def same(name, a, b):
    if a.tobytes() != b.tobytes():
        bad = np.flatnonzero(a != b)[:5]
        failures.append(f"rank {me}: {name}: device and runner differ at {bad.tolist()}: {a[bad]} vs {b[bad]}")


def both(name, call):
    got, want = (call(backend) for backend in (device, runner))
    same(name, got, want)


for dtype in ("float32", "float16", "float64"):
    for size in (1, 777, 5000 + n):
        for op in (ReduceOp.SUM, ReduceOp.MAX):
            def allreduce(backend, dtype=dtype, size=size, op=op):
                buf = cupy.asarray(floats(1000 * size + me, dtype, size))
                backend.allreduce(buf, op)
                return cupy.asnumpy(buf)
            both(f"allreduce {dtype} {op.name} {size}", allreduce)

for root in range(n):
    def broadcast(backend, root=root):
        buf = cupy.asarray(floats(50 + me, "float32", 3001))
        backend.broadcast(buf, root)
        return cupy.asnumpy(buf)
    both(f"broadcast root {root}", broadcast)

counts = [2 * r + 3 for r in range(n)]


def allgather(backend):
    recv = cupy.zeros(sum(counts), dtype=cupy.float64)
    backend.allgather(cupy.asarray(floats(60 + me, "float64", counts[me])), recv, counts)
    return cupy.asnumpy(recv)


both("allgather", allgather)


for dtype in ("float32", "float16"):
    def reducescatter(backend, dtype=dtype):
        recv = cupy.zeros(counts[me], dtype=dtype)
        backend.reducescatter(cupy.asarray(floats(70 + me, dtype, sum(counts))), recv, counts, ReduceOp.SUM)
        return cupy.asnumpy(recv)

    both(f"reducescatter {dtype}", reducescatter)

# The timeline names the algorithm of every call.
for backend, name in ((runner, "ALGORITHM_RUNNER"), (device, "ALGORITHM_DEVICE")):
    phases = set(backend.ctx.timeline.phases)
    if n > 1 and phases != {name}:
        failures.append(f"rank {me}: the {name} backend's timeline shows {sorted(phases)}")
runner.close()
device.close()

# One rank skips a call of a known shape: every other rank's launch ends with a BackendError, nobody hangs.
if n > 1:
    lonely = make_backend("device", timeout=3.0)
    buf = cupy.asarray(floats(80, "float32", 999))
    lonely.allreduce(buf, ReduceOp.SUM)  # every rank: the call shape's memory is made together
    if me != 0:
        try:
            lonely.allreduce(buf, ReduceOp.SUM)
            failures.append(f"rank {me}: an all-reduce that rank 0 never joined returned")
        except BackendError as e:
            if "not done within 3 s" not in str(e) and "aborted" not in str(e):
                failures.append(f"rank {me}: unexpected error {e}")
        try:
            lonely.allreduce(buf, ReduceOp.SUM)
            failures.append(f"rank {me}: a call after an aborted launch ran")
        except BackendError as e:
            if "stopped after an earlier failure" not in str(e):
                failures.append(f"rank {me}: unexpected error {e}")
    comm.Barrier()
    lonely.close()

all_failures = comm.gather(failures, root=0)
if me == 0:
    flat = [f for fs in all_failures for f in fs]
    print("\n".join(flat) if flat else f"BITWISE OK {n} ranks, {HOSTS} hosts")
    sys.exit(1 if flat else 0)
