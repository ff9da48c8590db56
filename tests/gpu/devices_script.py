"""Each local rank on its own GPU, as on a multi-GPU machine (Horovod's recipe:
``cupy.cuda.Device(local_rank).use()``). Every collective's result must be right and live on the
rank's GPU, though the runtime's threads start on device 0.

Run by ``tests/mpi/test_devices_fake_cupy.py`` under the fake CuPy with one fake GPU per rank and
no peer access between some of them (so work issued on the wrong device fails there as it would
race or fail on a GPU). A case script of the harness (tests/harness.py); its last case prints the
links the receive arena opened (``rank R links [...] mapped [...] staged [...]``) for the test.
"""
import cupy
import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from harness import close, run_cases, skip

bf.init()
n, r = bf.size(), bf.rank()
mine = bf.local_rank() % cupy.cuda.runtime.getDeviceCount()
cupy.cuda.Device(mine).use()
base = np.arange(1000, dtype=np.float32)
total = sum(base + k for k in range(n))


def on_my_gpu(label, got, want):
    assert got.device.id == mine, f"{label} lives on GPU {got.device.id}, not the rank's GPU {mine}"
    close(cupy.asnumpy(got), want, what=label)


def case_allreduce(rank, size):
    on_my_gpu("allreduce", bf.allreduce(cupy.asarray(base + r), op=bf.Sum, name="one"), total)


def case_fused_allreduce(rank, size):
    """Several tensors packed into one buffer."""
    fused = bf.grouped_allreduce([cupy.asarray(base + r), cupy.asarray(base[:7] * 2 + r)], op=bf.Sum, name="fused")
    on_my_gpu("fused allreduce", fused[0], total)
    on_my_gpu("fused allreduce 2", fused[1], sum(base[:7] * 2 + k for k in range(n)))


def case_broadcast_from_every_root(rank, size):
    for root in range(n):
        got = bf.broadcast(cupy.asarray(base + r), root_rank=root, name=f"bcast{root}")
        on_my_gpu(f"broadcast from {root}", got, base + root)


def case_allgather(rank, size):
    gathered = bf.allgather(cupy.asarray(np.full(r + 1, r, dtype=np.int32)), name="gather")
    on_my_gpu("allgather", gathered, np.concatenate([np.full(k + 1, k, dtype=np.int32) for k in range(n)]))


def case_reducescatter(rank, size):
    scattered = bf.reducescatter(cupy.asarray(np.ones(4 * n, dtype=np.float32)), op=bf.Sum, name="scatter")
    on_my_gpu("reducescatter", scattered, np.full(4, n, dtype=np.float32))


def case_a_joined_rank_adds_zeros(rank, size):
    if n == 1:
        skip("one rank: no rank to join early")
    if r == n - 1:
        bf.join()
    else:
        again = bf.allreduce(cupy.asarray(base), op=bf.Sum, name="joined")
        on_my_gpu("allreduce with a joined rank", again, base * (n - 1))
        bf.join()


def case_the_receive_arena_opened_links(rank, size):
    """What the receive arena opened: the links its schedules use, the peers it maps or stages to."""
    if n == 1:
        skip("one rank: no arena")
    arena = rt.RUNTIME.engine._backends["cuda"]._arena
    print(f"rank {r} links {sorted(arena.links)} mapped {sorted(set(arena.peer_base) - arena.staged_to)} "
          f"staged {sorted(arena.staged_to)}", flush=True)


if __name__ == "__main__":
    run_cases(globals(), r, n)
