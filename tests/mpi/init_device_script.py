"""Run under mpirun with the fake CuPy, one fake GPU per rank and no peer access between them (2 ranks):
``init()`` alone (the script never calls ``cupy.cuda.Device(...).use()``) makes the rank's GPU the
calling thread's current device, so arrays made afterwards live where the rank's collectives run.

``blinkflow`` or ``tensorflow`` (argv[1]) names whose ``init`` is called; both must agree. CUDA's
current device belongs to a thread: a thread started later begins on device 0 and is moved by
its own ``init()`` call. A tensor one rank left on GPU 0 is refused on every rank (the backend would
pack it on the wrong GPU). Prints ``INIT DEVICE OK <mode>``; exits 1 naming each failure.
"""
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tf"))
from script_checks import Checks  # noqa: E402  (tests/tf/script_checks.py: no TensorFlow needed)

mode = sys.argv[1]
if mode == "tensorflow":
    import blinkflow.tensorflow as binding
else:
    import blinkflow as binding
import blinkflow as bf  # noqa: E402
import cupy  # noqa: E402

binding.init()
n, r = bf.size(), bf.rank()
mine = bf.local_rank()
checks = Checks(r)
checks.check(f"init() made GPU {mine} current", cupy.cuda.runtime.getDevice() == mine, cupy.cuda.runtime.getDevice())
x = cupy.asarray(np.arange(6, dtype=np.float32) + r)
checks.check(f"an array made after init() lives on GPU {mine}", x.device.id == mine, x.device.id)
try:
    got = bf.allreduce(x, op=bf.Sum, name="after_init")
    checks.close("allreduce of it", cupy.asnumpy(got), sum(np.arange(6, dtype=np.float32) + k for k in range(n)))
except bf.BlinkflowError as e:
    checks.check("allreduce of it", False, e)

# One rank's tensor on the wrong GPU: every rank's call fails alike, naming it, and the job goes on.
with cupy.cuda.Device(0):  # rank 0's own GPU; rank 1's wrong one
    y = cupy.ones(3, dtype=cupy.float32)
try:
    bf.allreduce(y, name="wrong_gpu")
    checks.check("a tensor on another GPU is refused", False, "it ran")
except bf.InvalidArgumentError as e:
    checks.check("the refusal names the rank that made it", "rank 1" in str(e), e)
    checks.check("the refusal says which GPU to use", r != 1 or "drives GPU 1" in str(e), e)
again = bf.allreduce(cupy.ones(2, dtype=cupy.float32), op=bf.Sum, name="after_wrong_gpu")
checks.close("the job goes on after the refusal", cupy.asnumpy(again), np.full(2, float(n), np.float32))

seen = {}


def other_thread():
    seen["before"] = cupy.cuda.runtime.getDevice()
    binding.init()  # running already: only moves this thread
    seen["after"] = cupy.cuda.runtime.getDevice()


thread = threading.Thread(target=other_thread)
thread.start()
thread.join()
checks.check("a new thread starts on device 0", seen.get("before") == 0, seen)
checks.check(f"init() in that thread moves it to GPU {mine}", seen.get("after") == mine, seen)
checks.report(f"INIT DEVICE OK {mode}")
