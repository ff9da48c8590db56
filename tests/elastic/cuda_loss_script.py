"""A rank lost on GPUs (the cuda backend; under the fake CuPy in CI, on a real machine on the GPU
tier): run by test_losing_ranks.py on 3 ranks under ULFM. Rank 1 dies between collectives; the
survivors re-form, and old rank 2, now rank 1 and local rank 1, still drives CUDA device 2 and
topology device 2 (its context and tensors are there); the all-reduce of cupy arrays is then the
survivors' exact sum. Prints ``GPU rank <old> new <new> ordinal <cuda device> device <topology
device> ok``, and ``GPU memory of the old job <n> allocations, <k> left after the reset``: the
fake CuPy's device allocations and mapped IPC handles (receive slots, device executor memory, the
peers' memory this rank mapped) that existed before the loss, and how many of them are still
allocated once the job re-formed.
"""
import os
import signal
import time

import cupy
import numpy as np

import blinkflow as bf
from blinkflow.elastic import reform
from blinkflow.errors import RanksLostError
from blinkflow.runtime.global_state import RUNTIME


def device_memory():
    """The fake CuPy's live device allocations and opened IPC handles, by their segment's name
    (an address may be reused once freed)."""
    return {shm.name for shm, _, _ in cupy.cuda.runtime._segments.values()}


bf.init()
first = bf.rank()
assert bf.size() == 3
before = cupy.cuda.runtime.getDevice()
bf.allreduce(cupy.ones(16), name="warm")
old_memory = device_memory()
if first == 1:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    for step in range(1000):
        bf.allreduce(cupy.ones(16), name=f"step.{step}")
        time.sleep(0.01)
    raise AssertionError("collectives went on after a rank was killed")
except RanksLostError as error:
    assert error.ranks == [1], repr(error)
reform()
job = RUNTIME.engine.job
ordinal = cupy.cuda.runtime.getDevice()
assert ordinal == before, (ordinal, before)
assert job.devices[job.rank] == first, (job.devices, first)
got = bf.allreduce(cupy.full(1024, float(first + 1)), op=bf.Sum, name="after")
assert isinstance(got, cupy.ndarray) and np.array_equal(cupy.asnumpy(got), np.full(1024, 4.0)), got
left = old_memory & device_memory()
print(f"GPU memory of the old job {len(old_memory)} allocations, {len(left)} left after the reset", flush=True)
print(f"GPU rank {first} new {bf.rank()} ordinal {ordinal} device {job.devices[job.rank]} ok", flush=True)
bf.shutdown()
