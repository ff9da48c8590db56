"""Fake ``cupy.cuda.runtime``: cudaMalloc is shared memory so IPC handles open across processes.

Strict where a real GPU would be silently wrong or would refuse: an IPC handle only for the base
of a ``malloc``, never opened by the process that made it; an IPC event handle only for an event
created with ``cudaEventInterprocess | cudaEventDisableTiming``; a stream wait on an event that
was never recorded (on a GPU a no-op, i.e. a race) raises; so does an overlapping copy.
"""
import ctypes
import itertools
from multiprocessing import shared_memory

_segments = {}  # address -> SharedMemory (kept alive; creator unlinks on free)
_events = itertools.count(1)
_event_records = {}  # event -> SharedMemory whose first 8 bytes count its records (seen by every process)
_EVENT_INTERPROCESS_FLAGS = 0x2 | 0x4  # cudaEventDisableTiming | cudaEventInterprocess


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
    if addr not in _segments or not _segments[addr][1]:
        raise RuntimeError(f"fake cudaIpcGetMemHandle: {addr:#x} is not the base of a cudaMalloc of this process")
    name = _segments[addr][0].name.encode()
    return name.ljust(64, b"\0")


def _attach(handle):
    """Open another process's segment; its creator owns it, so this process's resource tracker
    must not unlink it at exit."""
    from multiprocessing import resource_tracker

    shm = shared_memory.SharedMemory(name=handle.rstrip(b"\0").decode())
    try:
        resource_tracker.unregister(shm._name, "shared_memory")
    except Exception:
        pass
    return shm


def ipcOpenMemHandle(handle, flags=1):
    name = handle.rstrip(b"\0").decode()
    if any(shm.name == name and owner for shm, owner in _segments.values()):
        raise RuntimeError("fake cudaIpcOpenMemHandle: a process cannot open its own IPC handle")
    shm = _attach(handle)
    addr = _address(shm)
    _segments[addr] = (shm, False)
    return addr


def ipcCloseMemHandle(addr):
    free(addr)


def eventCreateWithFlags(flags):
    event = next(_events)
    if flags & _EVENT_INTERPROCESS_FLAGS == _EVENT_INTERPROCESS_FLAGS:
        _event_records[event] = (shared_memory.SharedMemory(create=True, size=8), True)
        _event_records[event][0].buf[:8] = bytes(8)
    return event


def eventDestroy(event):
    shm, owner = _event_records.pop(event, (None, False))
    if shm is not None:
        shm.close()
        if owner:
            shm.unlink()


def ipcGetEventHandle(event):
    if event not in _event_records or not _event_records[event][1]:
        raise RuntimeError("fake cudaIpcGetEventHandle: the event needs cudaEventInterprocess | cudaEventDisableTiming")
    return _event_records[event][0].name.encode().ljust(64, b"\0")


def ipcOpenEventHandle(handle):
    event = next(_events)
    _event_records[event] = (_attach(handle), False)
    return event


def _records(event):
    return int.from_bytes(bytes(_event_records[event][0].buf[:8]), "little")


def eventRecord(event, stream):
    if event in _event_records:
        _event_records[event][0].buf[:8] = (_records(event) + 1).to_bytes(8, "little")


def streamWaitEvent(stream, event, flags=0):
    if event in _event_records and _records(event) == 0:
        raise RuntimeError("fake cudaStreamWaitEvent: the event was never recorded; on a GPU this wait "
                           "returns at once and the stream races the peer")


def memcpyAsync(dst, src, nbytes, kind, stream):
    if dst != src and dst < src + nbytes and src < dst + nbytes:
        raise RuntimeError("fake cudaMemcpyAsync: source and target overlap (undefined on a GPU)")
    ctypes.memmove(dst, src, nbytes)
