"""Run under mpirun by tests/mpi/test_device_executor_fake_cupy.py: the cuda backend's device
executor against its host-driven runner, bitwise, on the planner's trees of an HGX H100 (and of
two pretend hosts: the three-phase all-reduce, network edges through the proxy thread).

argv: HOSTS [CASE ...]; the environment's WATCHDOG_S (60 by default) is the device executor's
deadline per launch, which the prepared GPU run sets inside its step's time limit.

Two backends on the same ranks: one with BLINKFLOW_ALGORITHM=runner, one with
BLINKFLOW_ALGORITHM=device. Every collective runs on both with random floats (sums in
different orders, or rounded at other points, would differ in their last bits) and the results
must be the same bytes, float16 sums included (where a tree node folds several children in one
pass, both round once). The timeline names the algorithm of every call. Then one rank skips a
call: the others' launches must end with a BackendError within the deadline, never hang. A case
script of the harness (tests/harness.py).
"""
import functools
import os
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
from harness import run_cases, skip

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


WATCHDOG_S = float(os.environ.get("WATCHDOG_S", "60"))


def make_backend(algorithm, timeout=WATCHDOG_S):
    config = Config(chunk_bytes=2048, algorithm=algorithm)
    ctx = BackendContext(comm=comm, local_comm=local, cross_comm=cross, layout=Layout(me, HOST_OF, DEVICES),
                         topology=TOPOLOGY, config=config,
                         plan_for=lambda collective, root=None: make_plan(TOPOLOGY, collective, devices=list(DEVICES),
                                                                          root=root))
    ctx.timeline = Timeline()
    return CudaBackend(ctx, nslots=2, arena_bytes=4 << 20, device_timeout=timeout)


@functools.lru_cache(maxsize=None)
def backends():
    """(runner, device): made by the first case, so that a failure to make them ends the job."""
    return make_backend("runner"), make_backend("device")


def floats(seed, dtype, size):
    return (np.random.default_rng(seed).standard_normal(size) * 100).astype(dtype)


def same(name, a, b):
    if a.tobytes() != b.tobytes():
        bad = np.flatnonzero(a != b)[:5]
        raise AssertionError(f"{name}: device and runner differ at {bad.tolist()}: {a[bad]} vs {b[bad]}")


def both(name, call):
    runner, device = backends()
    got, want = (call(backend) for backend in (device, runner))
    same(name, got, want)


def case_allreduce_sum_and_max_of_floats(rank, size):
    for dtype in ("float32", "float16", "float64"):
        for nelems in (1, 777, 5000 + n):
            for op in (ReduceOp.SUM, ReduceOp.MAX):
                def allreduce(backend, dtype=dtype, nelems=nelems, op=op):
                    buf = cupy.asarray(floats(1000 * nelems + me, dtype, nelems))
                    backend.allreduce(buf, op)
                    return cupy.asnumpy(buf)
                both(f"allreduce {dtype} {op.name} {nelems}", allreduce)


def case_broadcast_from_every_root(rank, size):
    for root in range(n):
        def broadcast(backend, root=root):
            buf = cupy.asarray(floats(50 + me, "float32", 3001))
            backend.broadcast(buf, root)
            return cupy.asnumpy(buf)
        both(f"broadcast root {root}", broadcast)


COUNTS = [2 * r + 3 for r in range(n)]


def case_allgather(rank, size):
    def allgather(backend):
        recv = cupy.zeros(sum(COUNTS), dtype=cupy.float64)
        backend.allgather(cupy.asarray(floats(60 + me, "float64", COUNTS[me])), recv, COUNTS)
        return cupy.asnumpy(recv)
    both("allgather", allgather)


def case_reducescatter(rank, size):
    for dtype in ("float32", "float16"):
        def reducescatter(backend, dtype=dtype):
            recv = cupy.zeros(COUNTS[me], dtype=dtype)
            backend.reducescatter(cupy.asarray(floats(70 + me, dtype, sum(COUNTS))), recv, COUNTS, ReduceOp.SUM)
            return cupy.asnumpy(recv)
        both(f"reducescatter {dtype}", reducescatter)


def case_the_timeline_names_the_algorithm_of_every_call(rank, size):
    """(Then both backends close.)"""
    runner, device = backends()
    phases = {name: set(backend.ctx.timeline.phases) for backend, name in
              ((runner, "ALGORITHM_RUNNER"), (device, "ALGORITHM_DEVICE"))}
    runner.close()
    device.close()
    if n == 1:
        skip("one rank: nothing moves, the timeline is empty")
    for name, seen in phases.items():
        assert seen == {name}, f"the {name} backend's timeline shows {sorted(seen)}"


def case_a_call_one_rank_skips_ends_in_a_backend_error_not_a_hang(rank, size):
    """One rank skips a call of a known shape: every other rank's launch ends with a BackendError."""
    if n == 1:
        skip("one rank: no peer to skip a call")
    lonely = make_backend("device", timeout=3.0)
    buf = cupy.asarray(floats(80, "float32", 999))
    lonely.allreduce(buf, ReduceOp.SUM)  # every rank: the call shape's memory is made together
    if me != 0:
        try:
            lonely.allreduce(buf, ReduceOp.SUM)
            raise AssertionError("an all-reduce that rank 0 never joined returned")
        except BackendError as e:
            assert "not done within 3 s" in str(e) or "aborted" in str(e), f"unexpected error {e}"
            # The deadline names where this rank's blocks stopped: waiting for rank 0's chunks.
            assert f"on rank {me}: " in str(e) and "block(s) stuck: block " in str(e) and "waiting for" in str(e), \
                f"the error does not name the stuck blocks: {e}"
        try:
            lonely.allreduce(buf, ReduceOp.SUM)
            raise AssertionError("a call after an aborted launch ran")
        except BackendError as e:
            assert "stopped after an earlier failure" in str(e), f"unexpected error {e}"
    comm.Barrier()
    lonely.close()


if __name__ == "__main__":
    run_cases(globals(), me, n, only=sys.argv[2:])
