"""Run under mpirun by tests/mpi/test_data_plane_safety_fake_cupy.py: the cuda backend's races
and failure paths that a GPU shows rarely, made certain by the fake CuPy (tests/fake_cupy), which
defers ``cudaMemset``, returns garbage from ``cudaMalloc``, records frees of memory a peer still
maps, refuses IPC between MIG instances, and models residency and failing launches.

argv: SETTING [CASES...]: ``h100`` (ranks on GPUs of an HGX H100), ``h100x2`` (the ranks split
over two pretend HGX H100 hosts: network edges through the proxy) or ``mig`` (ranks on MIG
instances of one GPU: run with FAKE_CUPY_MIG=1 and one fake device per rank).

A case script of the harness (tests/harness.py).
"""
import dataclasses
import sys
import time

import cupy
import numpy as np
from mpi4py import MPI

import cupy._interpreter as fake_kernel
from blinkflow.backends.base import BackendContext, Layout
from blinkflow.backends.cuda import CudaBackend
from blinkflow.backends.cuda import device_executor
from blinkflow.config import Config
from blinkflow.errors import BackendError
from blinkflow.ops import ReduceOp
from blinkflow.planner import make_plan
from blinkflow.schedule import policy
from blinkflow.topology.presets import get_preset
from harness import run_cases, skip

SETTING = sys.argv[1]
comm = MPI.COMM_WORLD
n, me = comm.size, comm.rank
HOSTS = 2 if SETTING == "h100x2" else 1
HOST_OF = tuple(r * HOSTS // n for r in range(n))
local = comm.Split(HOST_OF[me], key=me)
cross = comm.Split(local.rank, key=me)
TOPOLOGY = get_preset("2xhgx-h100" if HOSTS > 1 else "hgx-h100")
SIZES = [HOST_OF.count(h) for h in range(HOSTS)]
DEVICES = tuple(d for h, size in zip(TOPOLOGY.hosts, SIZES) for d in TOPOLOGY.compute_on_host(h)[:size])


def make_backend(algorithm, timeout=60.0):
    config = Config(chunk_bytes=2048, algorithm=algorithm)
    ctx = BackendContext(comm=comm, local_comm=local, cross_comm=cross, layout=Layout(me, HOST_OF, DEVICES),
                         topology=TOPOLOGY, config=config,
                         plan_for=lambda collective, root=None: make_plan(TOPOLOGY, collective, devices=list(DEVICES),
                                                                          root=root))
    return CudaBackend(ctx, nslots=2, arena_bytes=4 << 20, device_timeout=timeout)


def summed(backend, nelems, dtype="float32"):
    """An all-reduce of small integers (exact in any order): every rank's result and the sum."""
    with backend.device_scope():
        buf = cupy.asarray((np.arange(nelems) % 7 + me).astype(dtype))
        backend.allreduce(buf, ReduceOp.SUM)
        got = cupy.asnumpy(buf)
    want = (n * (np.arange(nelems) % 7) + n * (n - 1) // 2).astype(dtype)
    return got, want


def expect_sum(backend, nelems, what):
    got, want = summed(backend, nelems)
    assert got.tobytes() == want.tobytes(), f"{what}: wrong sum at {np.flatnonzero(got != want)[:5].tolist()}"


def needs_peers():
    if SETTING not in ("h100", "h100x2"):
        skip("a case of the HGX H100 settings")
    if n == 1:
        skip("one rank: the device executor moves nothing")


def case_a_peers_first_post_survives_the_zeroing_of_the_counters(rank, size):
    """Rank 0 is slow to launch its first call: rank 1's blocks post into rank 0's rings and
    counters before rank 0's next stream work runs, which must not be the counters' memset."""
    needs_peers()
    backend = make_backend("device", timeout=10.0)
    real = device_executor.kernels.get_kernel

    def slow(*args):
        time.sleep(2.0)
        return real(*args)
    if me == 0:
        device_executor.kernels.get_kernel = slow
    try:
        expect_sum(backend, 3001, "the first call")
    finally:
        device_executor.kernels.get_kernel = real
        backend.close()


def case_a_launch_that_fails_leaves_the_next_call_clean(rank, size):
    """Every rank's launch fails once (out of resources): that call raises a BackendError, and
    the next call of the same shape runs and is right (no abort flag or proxy error left over)."""
    needs_peers()
    backend = make_backend("device", timeout=10.0)
    try:
        expect_sum(backend, 2001, "the call before")
        fake_kernel.FAIL_LAUNCHES = 1
        try:
            summed(backend, 2001)
            raise AssertionError("a call whose launch failed returned")
        except BackendError as e:
            assert "launch failed" in str(e), f"unexpected error: {e}"
        finally:
            fake_kernel.FAIL_LAUNCHES = 0
        expect_sum(backend, 2001, "the call after a failed launch")
    finally:
        backend.close()


def case_a_grid_that_cannot_be_resident_fails_at_once_on_every_rank(rank, size):
    """Other work holds rank 0's GPU (the occupancy query does not see it): a cooperative launch
    cannot place the grid, and every rank raises a BackendError naming co-residency, well within
    the call's deadline, instead of blocks spinning until it. The next shape runs again."""
    needs_peers()
    timeout = 20.0
    backend = make_backend("device", timeout=timeout)
    try:
        expect_sum(backend, 1001, "the call before")
        if me == 0:
            fake_kernel.OTHER_RESIDENT_BLOCKS = fake_kernel.free_blocks()
        started = time.monotonic()
        try:
            summed(backend, 4001)
            raise AssertionError("a call whose grid cannot be resident returned")
        except BackendError as e:
            took = time.monotonic() - started
            assert "resident" in str(e) and "rank(s) 0:" in str(e), f"unexpected error: {e}"
            assert took < timeout / 2, f"the error took {took:.1f} s (the call's deadline is {timeout:g} s)"
        finally:
            fake_kernel.OTHER_RESIDENT_BLOCKS = 0
        expect_sum(backend, 5001, "the next shape")
    finally:
        backend.close()


def case_where_the_policy_chose_the_device_a_grid_that_cannot_be_resident_runs_on_the_runner(rank, size):
    """A policy that picks the device executor wherever it is offered; rank 0's GPU is held by
    other work: every rank falls back to the runner for the call (and the job), with the right
    sum, instead of spinning until the deadline."""
    needs_peers()
    real = policy.choose

    def prefers_device(collective, nbytes, itemsize, layout, config, caps, **kw):
        if caps.device_executor and collective in policy.COLLECTIVES:
            config = dataclasses.replace(config, algorithm="device")
        return real(collective, nbytes, itemsize, layout, config, caps, **kw)
    policy.choose = prefers_device
    timeout = 20.0
    backend = make_backend("auto", timeout=timeout)
    try:
        expect_sum(backend, 1001, "the call before")
        assert backend.last_choice.algorithm == "device", backend.last_choice
        if me == 0:
            fake_kernel.OTHER_RESIDENT_BLOCKS = fake_kernel.free_blocks()
        started = time.monotonic()
        expect_sum(backend, 4001, "the call that cannot be resident")
        took = time.monotonic() - started
        assert backend.last_choice.algorithm == "runner", backend.last_choice
        assert backend.caps.device_executor is False
        assert took < timeout / 2, f"the call took {took:.1f} s (the device executor's deadline is {timeout:g} s)"
    finally:
        fake_kernel.OTHER_RESIDENT_BLOCKS = 0
        policy.choose = real
        backend.close()


def case_close_frees_nothing_a_peer_still_maps(rank, size):
    """Rank 0 closes first while the others are slower to: it must not free its rings and
    counters while they still map them (their last blocks may still post there)."""
    needs_peers()
    from cupy.cuda import runtime

    before = len(runtime.freed_while_mapped)
    backend = make_backend("device", timeout=10.0)
    expect_sum(backend, 3001, "the call")
    if me != 0:
        time.sleep(2.0)
    backend.close()
    bad = runtime.freed_while_mapped[before:]
    assert not bad, f"freed memory that live peers (pids {bad}) still mapped"


def case_ranks_on_mig_instances_exchange_over_mpi(rank, size):
    """Two MIG instances of one GPU report one PCI bus id; CUDA IPC (memory or events) does not
    work between them: their ranks exchange over MPI through the host (the runner), ranks on one
    instance through the IPC arena, and no device executor is offered."""
    if SETTING != "mig":
        skip("a case of the MIG setting")
    if n == 1:
        skip("one rank: no peer instance")
    backend = make_backend("auto")
    try:
        assert backend.caps.device_executor is False, "the device executor offered across MIG instances"
        expect_sum(backend, 3001, "an all-reduce across MIG instances")
        assert backend.last_choice.algorithm == "runner", backend.last_choice
    finally:
        backend.close()


if __name__ == "__main__":
    run_cases(globals(), me, n, only=sys.argv[2:])
