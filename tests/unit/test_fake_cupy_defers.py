"""tests/fake_cupy runs work late, in stream order, as a GPU may: what the library's
synchronisations are tested against (tests/tf/test_tf_sync_fake_cupy.py, the cuda backend's runs).
Each case here is one rule of CUDA's ordering the fake must keep, neither looser (a read that is
not synchronised sees old memory) nor stricter (what CUDA orders, the fake orders). Run in a
subprocess: the fake must never be imported into the test process itself."""
import os
import subprocess
import sys

FAKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_cupy")

SCRIPT = r'''
import numpy as np
import cupy
from cupy.cuda import runtime as rt

def stale(a):
    return bool(np.isnan(np.asarray(a)).all())

def ones(stream=None):
    if stream is None:
        return cupy.ones(4, cupy.float32)
    with stream:
        return cupy.ones(4, cupy.float32)

checks = {}
a = ones()
checks["issued work has not run"] = stale(a)
checks["a DLPack export flushes nothing"] = stale(np.from_dlpack(cupy._Capsule(
    cupy._dlpack.relabel(a.toDlpack(), cupy._dlpack.KDL_CPU, 0))))
checks[".get() runs the current stream"] = (a.get() == 1).all()

side = cupy.cuda.Stream(non_blocking=True)
b = ones(side)
b.get()
checks["the null stream's read does not run a non-blocking stream"] = stale(b)
event = side.record()
cupy.cuda.get_current_stream().wait_event(event)
checks["a wait orders nothing by itself"] = stale(b)
checks["... but the waiting stream's read runs what the event marks"] = (b.get() == 1).all()

blocking = cupy.cuda.Stream()
c = ones(blocking)
d = ones()
d.get()
checks["null-stream work waits for blocking streams (legacy default stream)"] = (np.asarray(c) == 1).all()
e = ones()
with blocking:
    f = e.copy()
blocking.synchronize()
checks["blocking-stream work waits for earlier null-stream work"] = (np.asarray(f) == 1).all()

g = ones(side)
h = cupy.empty(4, cupy.float32)
with side:
    h[...] = g
checks["in-stream order: a copy after a fill sees it"] = (h.get(stream=side) == 1).all()

k = ones(side)
cupy.cuda.Device().synchronize()
checks["a device synchronisation runs every stream"] = (np.asarray(k) == 1).all()

base = rt.malloc(16)
src = ones(side)
rt.memcpyAsync(base, src.data.ptr, 16, 4, side.ptr)
ipc = rt.eventCreateWithFlags(0x2 | 0x4)
rt.eventRecord(ipc, side.ptr)
checks["an IPC event record runs the stream's work before it"] = (
    np.frombuffer((__import__("ctypes").c_char * 16).from_address(base), np.float32) == 1).all()
rt.eventDestroy(ipc)
rt.free(base)

with cupy.cuda.Device(0):
    m = ones()
checks["a scalar read runs the current stream"] = float(m[2]) == 1.0
bad = [name for name, ok in checks.items() if not ok]
print("BAD", bad if bad else "none")
'''


def test_fake_cupy_runs_work_in_stream_order_and_late():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "BAD none", out.stdout
