"""Fake ``cupy.cuda.runtime``: cudaMalloc is shared memory so IPC handles open across processes."""
import ctypes
import itertools
from multiprocessing import shared_memory

_segments = {}  # address -> SharedMemory (kept alive; creator unlinks on free)
_events = itertools.count(1)


def _address(shm):
    return ctypes.addressof(ctypes.c_char.from_buffer(shm.buf))


def getDevice():
    return 0


def getDeviceCount():
    return 1


def deviceGetPCIBusId(device):
    return f"0000:00:00.{device}"  # every rank "shares" one GPU, like the GPU tests do


def malloc(nbytes):
    shm = shared_memory.SharedMemory(create=True, size=max(1, nbytes))
    addr = _address(shm)
    _segments[addr] = (shm, True)
    return addr


def free(addr):
    shm, owner = _segments.pop(addr)
    if owner:
        shm.unlink()  # the mapping itself goes with the process (ctypes still points into it)


def ipcGetMemHandle(addr):
    name = _segments[addr][0].name.encode()
    return name.ljust(64, b"\0")


def ipcOpenMemHandle(handle, flags=1):
    from multiprocessing import resource_tracker

    name = handle.rstrip(b"\0").decode()
    shm = shared_memory.SharedMemory(name=name)
    try:  # the creator owns the segment; do not let this process's tracker unlink it
        resource_tracker.unregister(shm._name, "shared_memory")
    except Exception:
        pass
    addr = _address(shm)
    _segments[addr] = (shm, False)
    return addr


def ipcCloseMemHandle(addr):
    free(addr)


def eventCreateWithFlags(flags):
    return next(_events)


def eventDestroy(event):
    pass


def ipcGetEventHandle(event):
    return str(event).encode().ljust(64, b"\0")


def ipcOpenEventHandle(handle):
    return next(_events)


def eventRecord(event, stream):
    pass


def streamWaitEvent(stream, event, flags=0):
    pass


def memcpyAsync(dst, src, nbytes, kind, stream):
    ctypes.memmove(dst, src, nbytes)
