"""Kill/add cycles on the runtime alone (no TensorFlow), run by test_grow_cycles.py under
``blinkrun --host-discovery-script`` (the script offers SIZE slots on this machine) with
``--blacklist-cooldown-range 1 1``: the highest rank SIGKILLs itself every other step while the
job has SIZE ranks; the survivors re-form without it, blinkrun sees the slot free once the host's
one-second blacklisting ends and asks for a new rank, which joins at the next commit.

``python grow_cycles_script.py CYCLES SIZE TOKEN`` (TOKEN: only there so the test can find the
job's processes). Prints on rank 0, after each reset that added a rank,
``ADDED resets <n> size <s> seconds <since the last such line, or since init()> fds <open fds>
threads <threads> maps <mapped shared-memory segments> dyncomms <communicators spanning
launches, counted as below>``;
on every rank at the end ``FINAL rank <r> size <s> step <step> w <w[0]>``, and on rank 0
``SEGMENTS <path> ...``: every shared-memory file it mapped in the job's life, and as its
``MPI_Finalize`` begins ``FINALIZING dynamic communicators <n>``: Open MPI's count of the
communicators spanning spawned processes still allocated (``?`` where the MPI library has none).
"""
import ctypes
import os
import signal
import sys
import threading
import time

import numpy as np

import blinkflow as bf
from blinkflow.elastic import history
from blinkflow.elastic.run import run_fn
from blinkflow.elastic.state import ObjectState
from blinkflow.runtime import lifecycle

CYCLES, SIZE = int(sys.argv[1]), int(sys.argv[2])


def mapped_shared_segments() -> int:
    with open("/proc/self/maps") as f:
        return len({line.split()[-1] for line in f if "/dev/shm/" in line})


_since = [time.monotonic()]


def report_added():
    if bf.rank() == 0 and history()[-1].added:
        now = time.monotonic()
        print(f"ADDED resets {len(history())} size {bf.size()} seconds {now - _since[0]:.2f} "
              f"fds {len(os.listdir('/proc/self/fd'))} threads {threading.active_count()} "
              f"maps {mapped_shared_segments()} dyncomms {dynamic_communicators()}", flush=True)
        _since[0] = now


def dynamic_communicators() -> str:
    """Open MPI's count of allocated communicators that span more than one launch."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/libmpi.so" in line}
    for path in paths:
        try:
            return str(ctypes.c_int.in_dll(ctypes.CDLL(path), "ompi_comm_num_dyncomm").value)
        except (OSError, ValueError):
            pass
    return "?"


def report_before_finalize(finalize):
    def wrapper(*args, **kwargs):
        print(f"FINALIZING dynamic communicators {dynamic_communicators()}", flush=True)
        return finalize(*args, **kwargs)
    return wrapper


bf.init()
if bf.rank() == 0:
    lifecycle._finalize_or_leave = report_before_finalize(lifecycle._finalize_or_leave)
state = ObjectState(step=0, w=np.zeros(8))
state.register_reset_callbacks([report_added])


@run_fn
def train(state):
    while True:
        if bf.size() < SIZE:          # a rank was lost: wait for blinkrun to add one
            time.sleep(0.05)
            state.check_host_updates()
            continue
        losses = sum(1 for reset in history() if reset.lost) if bf.rank() == 0 else None
        if bf.broadcast_object(losses, root_rank=0, name="losses") >= CYCLES:
            return
        state.w = state.w + bf.allreduce(np.ones(8), op=bf.Sum, name="grad")
        state.step += 1
        if state.step % 2 == 0 and bf.rank() == SIZE - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        state.commit()


train(state)
print(f"FINAL rank {bf.rank()} size {bf.size()} step {state.step} w {state.w[0]:g}", flush=True)
if bf.rank() == 0:
    with open("/proc/self/maps") as f:
        print("SEGMENTS " + " ".join(sorted({line.split()[-1] for line in f if "/dev/shm/" in line})), flush=True)
