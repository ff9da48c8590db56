"""Fake ``cupy.cuda.runtime``: cudaMalloc is shared memory so IPC handles open across processes.

Strict where a real GPU would be silently wrong or would refuse: an IPC handle only for the base
of a ``malloc``, never opened by the process that made it, and opened only from a device that
can access the owner's peer-to-peer, by at most 8 peer devices; an IPC event handle only for an
event created with ``cudaEventInterprocess | cudaEventDisableTiming``; a stream wait on an event
that was never recorded (on a GPU a no-op, i.e. a race) raises; so does an overlapping copy;
an IPC memory or event handle does not open on another MIG instance (``FAKE_CUPY_MIG=1``: CUDA
IPC between MIG instances is unsupported). Devices are those of :mod:`.._devices` (``FAKE_CUPY_DEVICES``,
``CUDA_VISIBLE_DEVICES``, ``FAKE_CUPY_MIG``).

``malloc`` returns garbage (:data:`POISON` bytes) and ``memset`` is issued on the device's legacy
default stream and runs late, as ``cudaMemset`` is asynchronous to the host: memory published to
a peer before its memset ran gets the peer's writes overwritten when it does. Every process that
opens an IPC handle marks the segment until it closes it; the owner's ``free`` while a live peer
still has the memory mapped is recorded in :data:`freed_while_mapped` (on a GPU the peer's late
writes land in memory that is no longer the ring it was).

Copies are issued on their stream and run deferred (:mod:`.._streams`); recording an IPC event
runs the stream's work before it, since the peer that waits on it cannot. ``cudaFree`` and
``cudaIpcCloseMemHandle`` synchronise the device first, as CUDA's do.
"""
import ctypes
import os
import itertools
import types
from multiprocessing import shared_memory

from .. import _devices, _streams
from .._devices import CUDARuntimeError  # noqa: F401  (cupy.cuda.runtime.CUDARuntimeError)

_segments = {}  # address -> SharedMemory (kept alive; creator unlinks on free)
_events = itertools.count(1)
_event_marks = {}  # event of this process (not interprocess) -> (stream queue, position) of its last record
_event_records = {}  # event -> SharedMemory whose first 8 bytes count its records (seen by every process)
_EVENT_INTERPROCESS_FLAGS = 0x2 | 0x4  # cudaEventDisableTiming | cudaEventInterprocess


def _address(shm):
    return ctypes.addressof(ctypes.c_char.from_buffer(shm.buf))


_peers_mapped = {}  # physical device -> physical devices whose memory it has mapped


def getDevice():
    return _devices.current()


def setDevice(device):
    _devices.set_current(device)


def getDeviceCount():
    return _devices.count()


def deviceGetPCIBusId(device):
    return f"0000:{_devices.pci_bus(_devices.VISIBLE[_devices.check(device)]):02X}:00.0"


def getDeviceProperties(device):
    physical = _devices.VISIBLE[_devices.check(device)]
    sms = int(os.environ.get("FAKE_CUPY_SMS", "4"))  # an H100's 132 for launches of many blocks
    return {"name": b"Fake GPU", "totalGlobalMem": 16 << 30, "multiProcessorCount": sms, "pciDomainID": 0,
            "pciBusID": _devices.pci_bus(physical), "pciDeviceID": 0, "uuid": _devices.uuid_of(physical)}


def deviceCanAccessPeer(device, peer):
    return int(_devices.can_access_peer(device, peer))


def pointerGetAttributes(ptr):
    """cudaPointerAttributes: ``type`` 2 (device memory) and its ``device`` for memory the fake
    allocated or mapped; ``type`` 0 (unregistered host memory), device -2, for anything else."""
    device = _devices.memory.find(int(ptr))
    if device is None:
        return types.SimpleNamespace(type=0, device=-2, devicePointer=0, hostPointer=int(ptr))
    return types.SimpleNamespace(type=2, device=device, devicePointer=int(ptr), hostPointer=0)


POISON = 0xFF
"""The bytes ``malloc`` returns (cudaMalloc does not clear memory)."""
_OPENERS = 64
"""Slots of the segment's trailer in which processes that opened its IPC handle write their pid
(slot ``pid % _OPENERS``: two openers that collide hide each other, never invent one)."""
_TRAILER = 8 * _OPENERS
freed_while_mapped = []
"""``(address, pids)`` of every ``free`` of memory that live peer processes still had mapped."""


def _openers(shm):
    """The trailer of a ``malloc`` segment: pids of the processes that have it mapped."""
    import numpy as np

    return np.ndarray((_OPENERS,), dtype=np.int64, buffer=shm.buf, offset=shm.size - _TRAILER)


def _alive(pid):
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def malloc(nbytes):
    shm = shared_memory.SharedMemory(create=True, size=max(1, nbytes) + _TRAILER)
    addr = _address(shm)
    ctypes.memset(addr, POISON, max(1, nbytes))
    _openers(shm)[:] = 0
    _segments[addr] = (shm, True, _devices.current())
    _devices.memory.add(addr, nbytes, _devices.current())
    return addr


def free(addr):
    for device in range(_devices.count()):  # no queued copy may touch the memory once it is unmapped
        _streams.synchronize_device(device)
    shm, owner, _ = _segments.pop(addr)
    _devices.memory.remove(addr)
    pids = _openers(shm)
    if owner:
        still = [int(p) for p in pids if p and _alive(p)]
        if still:
            freed_while_mapped.append((addr, still))
        shm.unlink()
    else:
        slot = os.getpid() % _OPENERS
        if pids[slot] == os.getpid():
            pids[slot] = 0  # the mapping itself goes with the process (ctypes still points into it)


def ipcGetMemHandle(addr):
    if addr not in _segments or not _segments[addr][1]:
        raise RuntimeError(f"fake cudaIpcGetMemHandle: {addr:#x} is not the base of a cudaMalloc of this process")
    shm, _, device = _segments[addr]
    # The handle names the segment and the (physical) GPU the memory lives on.
    return shm.name.encode().ljust(62, b"\0") + bytes([0, _devices.VISIBLE[device]])


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
    name = handle[:62].rstrip(b"\0").decode()
    if any(shm.name == name and owner for shm, owner, _ in _segments.values()):
        raise RuntimeError("fake cudaIpcOpenMemHandle: a process cannot open its own IPC handle")
    owner_gpu, here = handle[63], _devices.VISIBLE[_devices.current()]
    if owner_gpu != here and _devices.MIG:
        raise CUDARuntimeError(f"cudaErrorInvalidDevice: GPU {here} and GPU {owner_gpu} are MIG instances; CUDA IPC "
                               "between MIG instances is not supported")
    if owner_gpu != here:
        if (here, owner_gpu) in _devices._NO_PEER:
            raise CUDARuntimeError(f"cudaErrorPeerAccessUnsupported: GPU {here} cannot map GPU {owner_gpu}'s memory "
                                   "(no peer-to-peer path between them)")
        mapped = _peers_mapped.setdefault(here, set())
        if owner_gpu not in mapped and len(mapped) >= _devices.PEER_LIMIT:
            raise CUDARuntimeError(f"cudaErrorTooManyPeers: GPU {here} already maps {_devices.PEER_LIMIT} peers")
        mapped.add(owner_gpu)
    shm = _attach(handle[:62])
    addr = _address(shm)
    ordinal = _devices.VISIBLE.index(owner_gpu) if owner_gpu in _devices.VISIBLE else _devices.current()
    _segments[addr] = (shm, False, ordinal)
    _devices.memory.add(addr, shm.size - _TRAILER, ordinal)
    _openers(shm)[os.getpid() % _OPENERS] = os.getpid()
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
    # The handle names the segment and the (physical) GPU current when the handle was made.
    return _event_records[event][0].name.encode().ljust(62, b"\0") + bytes([0, _devices.VISIBLE[_devices.current()]])


def ipcOpenEventHandle(handle):
    owner_gpu, here = handle[63], _devices.VISIBLE[_devices.current()]
    if owner_gpu != here and _devices.MIG:
        raise CUDARuntimeError(f"cudaErrorInvalidDevice: GPU {here} and GPU {owner_gpu} are MIG instances; CUDA IPC "
                               "between MIG instances is not supported")
    event = next(_events)
    _event_records[event] = (_attach(handle[:62]), False)
    return event


def _records(event):
    return int.from_bytes(bytes(_event_records[event][0].buf[:8]), "little")


def eventRecord(event, stream):
    queue = _streams.by_ptr(stream)
    if event in _event_records:
        # A peer process waits on this record and cannot run our queue: the work before it runs now.
        queue.flush()
        _event_records[event][0].buf[:8] = (_records(event) + 1).to_bytes(8, "little")
    else:
        _event_marks[event] = queue.mark()


def eventSynchronize(event):
    mark = _event_marks.get(event)
    if mark is not None:
        mark[0].flush(mark[1])


def streamWaitEvent(stream, event, flags=0):
    queue = _streams.by_ptr(stream)
    if event in _event_records:
        if _records(event) == 0:
            raise RuntimeError("fake cudaStreamWaitEvent: the event was never recorded; on a GPU this wait "
                               "returns at once and the stream races the peer")
        return  # its recorder ran the work before the record
    mark = _event_marks.get(event)
    if mark is not None:
        queue.issue(lambda: None, deps=[mark])


def streamSynchronize(stream):
    _streams.by_ptr(stream).flush()


def deviceSynchronize():
    _streams.synchronize_device(_devices.current())


def memcpyAsync(dst, src, nbytes, kind, stream):
    if dst != src and dst < src + nbytes and src < dst + nbytes:
        raise RuntimeError("fake cudaMemcpyAsync: source and target overlap (undefined on a GPU)")
    _streams.by_ptr(stream).issue(lambda: ctypes.memmove(dst, src, nbytes))


_pinned = {}  # address -> bytes page-locked by hostRegister


def hostRegister(addr, nbytes, flags):
    if addr in _pinned or _devices.memory.find(addr) is not None:
        raise CUDARuntimeError("cudaErrorHostMemoryAlreadyRegistered: fake cudaHostRegister of registered or device "
                               f"memory at {addr:#x}")
    _pinned[addr] = nbytes


def hostUnregister(addr):
    if _pinned.pop(addr, None) is None:
        raise CUDARuntimeError(f"cudaErrorHostMemoryNotRegistered: {addr:#x}")


def memset(addr, value, nbytes):
    """cudaMemset: issued on the current device's legacy default stream, run late."""
    _streams.null_stream(_devices.current()).issue(lambda: ctypes.memset(addr, value, nbytes))


_host_allocs = {}  # address -> the buffer of a hostAlloc (kept alive until freeHost)


def hostAlloc(nbytes, flags):
    """Pinned host memory; with cudaHostAllocMapped (0x2) the device reads it at the same address
    (unified addressing), which the fake's kernels do anyway."""
    buf = (ctypes.c_char * max(1, nbytes))()
    addr = ctypes.addressof(buf)
    _host_allocs[addr] = buf
    _pinned[addr] = nbytes
    return addr


def freeHost(addr):
    if _host_allocs.pop(addr, None) is None:
        raise CUDARuntimeError(f"cudaErrorInvalidValue: fake cudaFreeHost of {addr:#x}, not a hostAlloc")
    _pinned.pop(addr, None)
