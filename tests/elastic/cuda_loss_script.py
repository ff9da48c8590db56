"""A rank lost on GPUs (the cuda backend; under the fake CuPy in CI, on a real machine on the GPU
tier): run by test_losing_ranks.py on 3 ranks under ULFM. Rank 1 dies between collectives; the
survivors re-form, and old rank 2, now rank 1 and local rank 1, still drives CUDA device 2 and
topology device 2 (its context and tensors are there); the all-reduce of cupy arrays is then the
survivors' exact sum. Prints ``GPU rank <old> new <new> ordinal <cuda device> device <topology
device> ok``.
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

bf.init()
first = bf.rank()
assert bf.size() == 3
before = cupy.cuda.runtime.getDevice()
bf.allreduce(cupy.ones(16), name="warm")
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
print(f"GPU rank {first} new {bf.rank()} ordinal {ordinal} device {job.devices[job.rank]} ok", flush=True)
bf.shutdown()
