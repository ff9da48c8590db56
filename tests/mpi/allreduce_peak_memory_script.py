"""Peak memory of one out-of-place all-reduce of SIZE MiB of float32 per rank, in multiples of the
tensor: ``mpirun -np N python tests/mpi/allreduce_peak_memory_script.py SIZE [PRESCALE]`` (a prescale
factor other than 1, as ``gradient_predivide_factor`` gives, makes the call Horovod's prescaled
all-reduce).

Prints per rank the peak RSS (``VmHWM``, reset before the call) above the runtime's baseline with
the input and the result included, and the proportional set size (PSS, shared pages divided
among the processes mapping them) sampled every 2 ms during the call: RSS counts a page of a
peer's shared-memory window that a rank reads once more in every rank that reads it. Then the
path the call took: ``single_copy`` or ``packed`` (``BLINKFLOW_CPU_SINGLE_COPY=0``).
"""
import sys
import threading

import numpy as np

import blinkflow as bf
from blinkflow.runtime.global_state import RUNTIME

MIB = 1 << 20


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _pss() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise KeyError("Pss")


def main():
    bf.init()
    size = int(sys.argv[1]) * MIB
    prescale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    bf.allreduce(np.ones(1024, np.float32), name="warm")
    # Held from now: once the measured call is done a faster peer may shut the job down, and
    # this rank's engine then lets go of its backends before the path is read below.
    backend = RUNTIME.engine._backends["cpu"]
    base = _status("VmRSS")
    x = np.full(size // 4, bf.rank() + 1.0, np.float32)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak RSS starts again from the current RSS
    top, done = [_pss()], threading.Event()

    def sample():
        while not done.is_set():
            top[0] = max(top[0], _pss())
            done.wait(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    y = bf.allreduce(x, op=bf.Sum, name="measured", prescale_factor=prescale)
    done.set()
    sampler.join()
    peak = _status("VmHWM")
    n = bf.size()
    path = backend.last_choice.algorithm if n > 1 else "none"
    path = "packed" if path == "runner" else path
    want = prescale * n * (n + 1) / 2
    assert float(y[0]) == want and float(y[-1]) == want, (float(y[0]), want)
    print(f"PEAK rank {bf.rank()} tensor_mib={size / MIB:.0f} rss_x={(peak - base) / size:.2f} "
          f"pss_x={(top[0] - base) / size:.2f} path={path} prescale={prescale:g}", flush=True)
    bf.shutdown()


if __name__ == "__main__":
    main()
