"""tests/fake_cupy refuses what a real GPU would refuse or get silently wrong, so the backend's
run on it (tests/mpi/test_cuda_backend_fake_cupy.py) means something. Run in a subprocess: the
fake must never be imported into the test process itself."""
import os
import subprocess
import sys

FAKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_cupy")

SCRIPT = r'''
from cupy.cuda import runtime as rt

def refuses(fn, *args):
    try:
        fn(*args)
    except RuntimeError as e:
        return str(e)
    raise SystemExit(f"{fn.__name__}{args} should have raised")

base = rt.malloc(1024)
print(refuses(rt.ipcOpenMemHandle, rt.ipcGetMemHandle(base)))
print(refuses(rt.ipcGetMemHandle, base + 256))
print(refuses(rt.ipcGetEventHandle, rt.eventCreateWithFlags(0)))
ready = rt.eventCreateWithFlags(0x2 | 0x4)
print(refuses(rt.streamWaitEvent, 0, ready, 0))
rt.eventRecord(ready, 0)
rt.streamWaitEvent(0, ready, 0)  # recorded once: a real wait
print(refuses(rt.memcpyAsync, base + 8, base, 16, 4, 0))
rt.eventDestroy(ready)
rt.free(base)
print("OK")
'''


def test_fake_cupy_refuses_what_a_gpu_would():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "OK"
    assert "own IPC handle" in lines[0] and "not the base" in lines[1] and "Interprocess" in lines[2]
    assert "never recorded" in lines[3] and "overlap" in lines[4]
