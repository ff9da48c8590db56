"""tests/fake_cupy refuses what a real GPU would refuse or get silently wrong, so the backend's
run on it (tests/mpi/test_cuda_backend_fake_cupy.py) means something. Run in a subprocess: the
fake must never be imported into the test process itself."""
import os
import subprocess
import sys
import tempfile

import pytest

from harness import fake_cupy_env, run_ranks

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


def _run(script, **env):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE, os.environ.get("PYTHONPATH", "")]), **env)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


DEVICES = r'''
import threading
import cupy
from cupy.cuda import runtime as rt

print(rt.getDeviceCount(), rt.getDevice())
print([rt.deviceGetPCIBusId(i) for i in range(rt.getDeviceCount())])
props = rt.getDeviceProperties(rt.getDeviceCount() - 1)
print(props["pciBusID"], props["uuid"].hex())
with cupy.cuda.Device(2):
    a = cupy.zeros(4)
    print("in", rt.getDevice(), a.device.id)
    seen = []
    t = threading.Thread(target=lambda: seen.append(rt.getDevice()))
    t.start(); t.join()
    print("thread", seen[0])  # every thread starts on device 0
print("out", rt.getDevice(), cupy.zeros(1).device.id, a[1:].device.id)
cupy.cuda.Device(1).use()
print("use", rt.getDevice(), cupy.cuda.Device().id)
rt.setDevice(3)
print("set", rt.getDevice())
try:
    rt.setDevice(4)
except rt.CUDARuntimeError as e:
    print("refused", e)
'''


def test_fake_cupy_has_several_devices_and_a_current_one_per_thread():
    lines = _run(DEVICES, FAKE_CUPY_DEVICES="4")
    assert lines[0] == "4 0"
    assert len(set(eval(lines[1]))) == 4  # distinct PCI bus ids
    assert lines[3] == "in 2 2" and lines[4] == "thread 0"
    assert lines[5] == "out 0 0 2" and lines[6] == "use 1 1" and lines[7] == "set 3"
    assert lines[8].startswith("refused") and "invalid device ordinal 4" in lines[8]


def test_cuda_visible_devices_renumbers_the_fake_gpus():
    script = ("from cupy.cuda import runtime as rt\n"
              "print(rt.getDeviceCount(), [rt.getDeviceProperties(i)['pciBusID'] for i in range(rt.getDeviceCount())])\n")
    everything = _run(script, FAKE_CUPY_DEVICES="4")[0]
    buses = eval(everything.split(" ", 1)[1])
    # Physical 3 then 1, the second by its uuid; the list ends at the first entry naming no GPU.
    uuid = _run("from cupy import _devices; print(_devices.uuid_text(1))", FAKE_CUPY_DEVICES="4")[0]
    picked = _run(script, FAKE_CUPY_DEVICES="4", CUDA_VISIBLE_DEVICES=f"3,{uuid},7,0")[0]
    assert picked == f"2 {[buses[3], buses[1]]}"


PEERS = r'''
import cupy
from cupy.cuda import runtime as rt

print(rt.deviceCanAccessPeer(0, 1), rt.deviceCanAccessPeer(0, 3), rt.deviceCanAccessPeer(2, 1), rt.deviceCanAccessPeer(1, 1))
with cupy.cuda.Device(3):
    far = cupy.ones(4)
with cupy.cuda.Device(1):
    near = cupy.ones(4)
print(cupy.concatenate([near, near]).device.id)  # made on the current device, 0; 0-1 can peer
for name, fn in [("copy", lambda: far.copy()), ("concatenate", lambda: cupy.concatenate([near, far])),
                 ("setitem", lambda: near.__setitem__(slice(None), far))]:
    try:
        fn()
        print(name, "ran")
    except ValueError as e:
        print(name, "refused:", e)
'''


def test_fake_cupy_arrays_refuse_a_device_without_peer_access():
    lines = _run(PEERS, FAKE_CUPY_DEVICES="4", FAKE_CUPY_NO_PEER="0-3,1-2")
    assert lines[0] == "1 0 0 0" and lines[1] == "0"
    assert all("refused" in line and "Peer access is unavailable" in line for line in lines[2:5]), lines


IPC_PEERS = r'''
import sys
from mpi4py import MPI
import cupy
from cupy.cuda import runtime as rt

comm = MPI.COMM_WORLD
rt.setDevice(comm.rank)
base = rt.malloc(1024)
handles = comm.allgather(rt.ipcGetMemHandle(base))
for peer, handle in enumerate(handles):
    if peer != comm.rank:
        try:
            rt.ipcOpenMemHandle(handle)
            print(comm.rank, peer, "opened")
        except rt.CUDARuntimeError as e:
            print(comm.rank, peer, "refused", str(e).split(":")[0])
print(comm.rank, rt.pointerGetAttributes(base).device, rt.pointerGetAttributes(base + 1000).type,
      rt.pointerGetAttributes(1).type)
sys.stdout.flush()
comm.Barrier()
'''


@pytest.mark.mpi
def test_fake_ipc_handles_open_only_between_peers():
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(IPC_PEERS)
    try:
        out = run_ranks(3, ["python", f.name], timeout=120, env=fake_cupy_env(FAKE_CUPY_DEVICES="3",
                                                                              FAKE_CUPY_NO_PEER="0-2"))
    finally:
        os.unlink(f.name)
    lines = set(out.stdout.splitlines())
    assert {"0 1 opened", "1 0 opened", "1 2 opened", "2 1 opened"} <= lines, out.stdout + out.stderr
    assert {"0 2 refused cudaErrorPeerAccessUnsupported", "2 0 refused cudaErrorPeerAccessUnsupported"} <= lines
    assert {"0 0 2 0", "1 1 2 0", "2 2 2 0"} <= lines


DLPACK = r'''
import numpy as np
import cupy

with cupy.cuda.Device(1):
    a = cupy.arange(6) if hasattr(cupy, "arange") else cupy.asarray(np.arange(6.0))
capsule = a.toDlpack()
b = cupy.from_dlpack(capsule)
print(b.device.id, b.data.ptr == a.data.ptr)
try:
    cupy.from_dlpack(np.arange(3.0).__dlpack__())
except RuntimeError as e:
    print("refused", e)
'''


def test_fake_dlpack_capsules_are_cuda_with_device_ids_and_host_ones_are_refused():
    lines = _run(DLPACK, FAKE_CUPY_DEVICES="2")
    assert lines[0] == "1 True"
    assert lines[1].startswith("refused") and "kDLCUDA" in lines[1]


LATE_AND_LIMITED = r'''
import ctypes
import numpy as np
import cupy
import cupy._interpreter as fake_kernel
from cupy.cuda import runtime as rt

def view(addr):
    return np.frombuffer((ctypes.c_char * 16).from_address(addr), dtype=np.uint8)

base = rt.malloc(16)
print("malloc", view(base).tolist() == [0xFF] * 16)
rt.memset(base, 0, 16)
print("memset queued", view(base).tolist() == [0xFF] * 16)
rt.deviceSynchronize()
print("memset ran", view(base).tolist() == [0] * 16)
rt.free(base)

kernel = cupy.RawModule().get_function("blinkflow_interpreter<float, 0>")
free = fake_kernel.free_blocks()
try:
    kernel((free + 1,), (256,), (), enable_cooperative_groups=True)
    print("cooperative too large launched")
except RuntimeError as e:
    print("cooperative", "cudaErrorCooperativeLaunchTooLarge" in str(e))
fake_kernel.FAIL_LAUNCHES = 1
try:
    kernel((1,), (256,), ())
    print("failing launch launched")
except RuntimeError as e:
    print("failing launch", "cudaErrorLaunchOutOfResources" in str(e))
print("next launch fails", fake_kernel.FAIL_LAUNCHES != 0)
print("props", rt.deviceGetPCIBusId(0) == rt.deviceGetPCIBusId(1), rt.deviceCanAccessPeer(0, 1),
      rt.getDeviceProperties(0)["uuid"] != rt.getDeviceProperties(1)["uuid"])
'''


def test_fake_cupy_memsets_late_returns_garbage_and_limits_residency_and_models_mig():
    """cudaMalloc's garbage, a memset that runs only when the device is synchronised, a cooperative
    launch past the free blocks and a failing launch refused, MIG instances sharing a bus id."""
    assert _run(LATE_AND_LIMITED, FAKE_CUPY_DEVICES="2", FAKE_CUPY_MIG="1") == [
        "malloc True", "memset queued True", "memset ran True", "cooperative True", "failing launch True",
        "next launch fails False", "props True 0 True"]


MIG_IPC = r'''
import sys
from mpi4py import MPI
from cupy.cuda import runtime as rt

comm = MPI.COMM_WORLD
rt.setDevice(comm.rank)
base = rt.malloc(64)
event = rt.eventCreateWithFlags(0x2 | 0x4)
theirs = comm.allgather((rt.ipcGetMemHandle(base), rt.ipcGetEventHandle(event)))[1 - comm.rank]
for what, fn, handle in (("memory", rt.ipcOpenMemHandle, theirs[0]), ("event", rt.ipcOpenEventHandle, theirs[1])):
    try:
        fn(handle)
        print(comm.rank, what, "opened")
    except RuntimeError as e:
        print(comm.rank, what, "refused" if "MIG" in str(e) else e)
sys.stdout.flush()
comm.Barrier()
'''


@pytest.mark.mpi
def test_fake_ipc_does_not_open_between_mig_instances():
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(MIG_IPC)
    try:
        out = run_ranks(2, ["python", f.name], timeout=120, env=fake_cupy_env(FAKE_CUPY_DEVICES="2", FAKE_CUPY_MIG="1"))
    finally:
        os.unlink(f.name)
    lines = set(out.stdout.splitlines())
    assert {f"{r} {w} refused" for r in (0, 1) for w in ("memory", "event")} <= lines, out.stdout + out.stderr
