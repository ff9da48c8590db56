"""Run under mpirun: each local rank on its own GPU, as on a multi-GPU machine (Horovod's recipe:
``cupy.cuda.Device(local_rank).use()``). Every collective's result must be right and live on the
rank's GPU, though the runtime's threads start on device 0.

Run by ``tests/mpi/test_devices_fake_cupy.py`` under the fake CuPy with one fake GPU per rank and
no peer access between some of them (so work issued on the wrong device fails there as it would
race or fail on a GPU). Prints ``DEVICES OK <ranks> ranks``; exits 1 naming each failure.
"""
import os
import sys

import cupy
import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tf"))
from script_checks import Checks  # noqa: E402  (tests/tf/script_checks.py: no TensorFlow needed)

bf.init()
n, r = bf.size(), bf.rank()
mine = bf.local_rank() % cupy.cuda.runtime.getDeviceCount()
cupy.cuda.Device(mine).use()
checks = Checks(r)


def on_my_gpu(label, got, want):
    checks.check(f"{label} lives on GPU {mine}", got.device.id == mine, got.device.id)
    checks.check(f"{label} is right", np.array_equal(cupy.asnumpy(got), want), cupy.asnumpy(got)[:4])


base = np.arange(1000, dtype=np.float32)
total = sum(base + k for k in range(n))
one = bf.allreduce(cupy.asarray(base + r), op=bf.Sum, name="one")
on_my_gpu("allreduce", one, total)
# Fused: several tensors packed into one buffer (and a rank that joins early adds zeros).
fused = bf.grouped_allreduce([cupy.asarray(base + r), cupy.asarray(base[:7] * 2 + r)], op=bf.Sum, name="fused")
on_my_gpu("fused allreduce", fused[0], total)
on_my_gpu("fused allreduce 2", fused[1], sum(base[:7] * 2 + k for k in range(n)))
for root in range(n):
    got = bf.broadcast(cupy.asarray(base + r), root_rank=root, name=f"bcast{root}")
    on_my_gpu(f"broadcast from {root}", got, base + root)
gathered = bf.allgather(cupy.asarray(np.full(r + 1, r, dtype=np.int32)), name="gather")
on_my_gpu("allgather", gathered, np.concatenate([np.full(k + 1, k, dtype=np.int32) for k in range(n)]))
scattered = bf.reducescatter(cupy.asarray(np.ones(4 * n, dtype=np.float32)), op=bf.Sum, name="scatter")
on_my_gpu("reducescatter", scattered, np.full(4, n, dtype=np.float32))
if r == n - 1 and n > 1:
    bf.join()
else:
    again = bf.allreduce(cupy.asarray(base), op=bf.Sum, name="joined")
    on_my_gpu("allreduce with a joined rank", again, base * (n - 1 if n > 1 else 1))
    if n > 1:
        bf.join()
arena = rt.RUNTIME.engine._backends["cuda"]._arena if n > 1 else None
if arena is not None:
    # What the receive arena opened: the links its schedules use, the peers it maps or stages to.
    print(f"rank {r} links {sorted(arena.links)} mapped {sorted(set(arena.peer_base) - arena.staged_to)} "
          f"staged {sorted(arena.staged_to)}", flush=True)
checks.report(f"DEVICES OK {n} ranks")
