"""With the fake CuPy, one fake GPU per rank and no peer access between them (2 ranks):
``init()`` alone (the script never calls ``cupy.cuda.Device(...).use()``) makes the rank's GPU the
calling thread's current device, so arrays made afterwards live where the rank's collectives run.

``blinkflow`` or ``tensorflow`` (argv[1]) names whose ``init`` is called; both must agree. CUDA's
current device belongs to a thread: a thread started later begins on device 0 and is moved by
its own ``init()`` call. A tensor one rank left on GPU 0 is refused on every rank (the backend would
pack it on the wrong GPU). A case script of the harness (tests/harness.py).
"""
import sys
import threading

import numpy as np

from harness import close, run_cases

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


def case_init_makes_the_rank_gpu_current(rank, size):
    assert cupy.cuda.runtime.getDevice() == mine, f"init() made GPU {cupy.cuda.runtime.getDevice()} current, not {mine}"
    x = cupy.asarray(np.arange(6, dtype=np.float32) + r)
    assert x.device.id == mine, f"an array made after init() lives on GPU {x.device.id}, not {mine}"
    got = bf.allreduce(x, op=bf.Sum, name="after_init")
    close(cupy.asnumpy(got), sum(np.arange(6, dtype=np.float32) + k for k in range(n)), what="allreduce of it")


def case_a_tensor_on_another_gpu_is_refused_on_every_rank(rank, size):
    """One rank's tensor on the wrong GPU: every rank's call fails alike, naming it, and the job goes on."""
    with cupy.cuda.Device(0):  # rank 0's own GPU; rank 1's wrong one
        y = cupy.ones(3, dtype=cupy.float32)
    try:
        bf.allreduce(y, name="wrong_gpu")
        raised = None
    except bf.BlinkflowError as e:
        raised = e
    assert isinstance(raised, bf.InvalidArgumentError), f"a tensor on another GPU: {type(raised).__name__} {raised}"
    assert "rank 1" in str(raised), f"the refusal names the rank that made it: {raised}"
    assert r != 1 or "drives GPU 1" in str(raised), f"the refusal says which GPU to use: {raised}"
    again = bf.allreduce(cupy.ones(2, dtype=cupy.float32), op=bf.Sum, name="after_wrong_gpu")
    close(cupy.asnumpy(again), np.full(2, float(n), np.float32), what="the job goes on after the refusal")


def case_a_new_thread_is_moved_by_its_own_init(rank, size):
    seen = {}

    def other_thread():
        seen["before"] = cupy.cuda.runtime.getDevice()
        binding.init()  # running already: only moves this thread
        seen["after"] = cupy.cuda.runtime.getDevice()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen.get("before") == 0, f"a new thread starts on device 0: {seen}"
    assert seen.get("after") == mine, f"init() in that thread moves it to GPU {mine}: {seen}"


if __name__ == "__main__":
    run_cases(globals(), r, n, only=sys.argv[2:])
