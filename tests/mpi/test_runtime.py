"""The runtime's multi-process tests: one mpirun launch per configuration runs its cases of
runtime_script.py, and pytest shows each case as a test of its own."""
import functools
import os

import pytest

from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "runtime_script.py")


def _hold(seconds):
    """A process a sibling may read, declared readable as the runtime's ranks are (Yama)."""
    import time

    from blinkflow.backends.cpu.cma import allow_peers

    allow_peers()
    time.sleep(seconds)


@functools.lru_cache(maxsize=1)
def cross_memory_attach_works() -> bool:
    """Whether this machine lets a process read a sibling's memory (what the cpu backend's
    single-copy path needs): fork two children and have one read the other."""
    import ctypes
    import multiprocessing

    def target(pid, address, queue):
        from blinkflow.backends.cpu.cma import PeerMemory
        import numpy as np

        try:
            got = np.zeros(1, np.int64)
            PeerMemory().read(pid, got, np.array([[address, 8]], np.uint64))
            queue.put(int(got[0]) == 12345)
        except Exception:  # noqa: BLE001 - any failure means "no"
            queue.put(False)

    ctx = multiprocessing.get_context("fork")
    value = ctypes.c_int64(12345)
    queue = ctx.Queue()
    holder = ctx.Process(target=_hold, args=(30,))
    holder.start()
    try:
        # The holder is a fork of this process: ``value`` sits at the same address in it.
        reader = ctx.Process(target=target, args=(holder.pid, ctypes.addressof(value), queue))
        reader.start()
        reader.join(30)
        return bool(queue.get(timeout=5))
    finally:
        holder.kill()
        holder.join()


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("case", case_names(CASES))
def test_every_collective(case, n):
    # A small fusion buffer, so "larger than the fusion buffer" and multi-batch fusion both happen.
    env = {"BLINKFLOW_FUSION_THRESHOLD": "65536", "EXPECT_SINGLE_COPY": str(int(cross_memory_attach_works()))}
    launch(n, CASES, env=env).expect(case)


SPLIT_CASES = ["basics", "allreduce_scaling_and_layout", "broadcast"]


@pytest.mark.mpi
@pytest.mark.parametrize("case", SPLIT_CASES)
def test_split_hosts_layout(case):
    """BLINKFLOW_SPLIT_HOSTS=2 at 4 ranks: two hosts of two ranks, a multi-host topology."""
    launch(4, CASES, env={"BLINKFLOW_SPLIT_HOSTS": "2"}, cases=SPLIT_CASES, timeout=120).expect(case)


CACHE_CASES = ["allreduce_everything", "allgather", "large_and_many", "mismatches", "join", "threads"]


@pytest.mark.mpi
@pytest.mark.parametrize("capacity", ["0", "4"], ids=["no-cache", "tiny-cache"])
@pytest.mark.parametrize("case", CACHE_CASES)
def test_response_cache_off_and_constantly_evicting(case, capacity):
    """Capacity 0: every cycle negotiates in full. Capacity 4: bits are evicted and reused while
    tensors that hold them wait, the hardest case for keeping every rank's cache identical."""
    env = {"BLINKFLOW_CACHE_CAPACITY": capacity, "BLINKFLOW_CYCLE_TIME": "3"}
    launch(3, CASES, env=env, cases=CACHE_CASES).expect(case)


LARGE_CASES = ["single_copy", "allreduce_everything", "large_and_many"]


@pytest.mark.mpi
@pytest.mark.parametrize("n,env", [(3, {"BLINKFLOW_CPU_SINGLE_COPY": "0"}), (4, {"BLINKFLOW_SPLIT_HOSTS": "2"}),
                                   (3, {"BLINKFLOW_SPLIT_HOSTS": "2", "EXPECT_SINGLE_COPY": "0"}),
                                   (3, {"BLINKFLOW_CHUNK_BYTES": "4096", "SINGLE_COPY_MANY_PIECES": "1"})],
                         ids=["shared-memory-copy", "two-hosts", "uneven-hosts", "small-chunks-many-pieces"])
@pytest.mark.parametrize("case", LARGE_CASES)
def test_large_allreduces_without_single_copy_and_across_hosts(case, n, env):
    """The large all-reduces again: packed through shared memory (single copy off); with single
    copy inside each of two hosts plus the cross-host phase; on hosts of 2 and 1 ranks, where
    single copy is off everywhere (its exit is one collective over all ranks, so every host must
    choose it alike: a host that packed left the others waiting); with 4 KiB chunks (tensors
    straddle chunk boundaries) and a group of more tensors than a rank's address table holds."""
    env = dict({"EXPECT_SINGLE_COPY": str(int(cross_memory_attach_works()))}, **env)
    launch(n, CASES, env=env, cases=LARGE_CASES).expect(case)


@pytest.mark.mpi
def test_contested_chunks_stay_exact_under_many_calls():
    """4 ranks, 4 KiB chunks, 1000 single-copy all-reduces: an owner and its helper meet on a
    chunk in every call; on the development VM a push landing on a partial value (the bug that
    made a CI run fail) showed up about once per 1000 calls before the fix (ChunkReducer.run)."""
    if not cross_memory_attach_works():
        pytest.skip("this host forbids cross-memory attach: no single-copy path to contest")
    env = {"BLINKFLOW_CHUNK_BYTES": "4096", "CONTESTED_CALLS": "1000", "EXPECT_SINGLE_COPY": "1"}
    launch(4, CASES, env=env, cases=["contested_chunks"]).expect("contested_chunks")
