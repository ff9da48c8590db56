"""The fake's GPUs: how many, which one each thread is on, which pairs can map each other, and
which device a pointer's memory lives on.

``FAKE_CUPY_DEVICES`` (default 1) is the machine's GPU count. ``CUDA_VISIBLE_DEVICES`` narrows
and reorders it as CUDA does (indices or ``GPU-<uuid>`` entries; the list ends at the first
entry that names no GPU), so ordinals here are the process's, and physical ids the machine's.
``FAKE_CUPY_NO_PEER=0-3,1-2`` lists physical pairs without peer access (a DGX-1's PCIe-only
pairs). ``FAKE_CUPY_MIG=1`` makes the GPUs MIG instances of one board: one PCI bus id for all
(the parent's, as CUDA reports it), a uuid each, no peer access between them. Every thread starts
on ordinal 0, as a CUDA thread does.
"""
import bisect
import os
import threading

MIG = os.environ.get("FAKE_CUPY_MIG") == "1"
"""The devices are MIG instances of one GPU."""
PEER_LIMIT = 8
"""CUDA maps at most this many peers into one device (cudaErrorTooManyPeers past it)."""


class CUDARuntimeError(RuntimeError):
    """What the fake raises where CUDA returns an error code."""


def _physical_count() -> int:
    return max(1, int(os.environ.get("FAKE_CUPY_DEVICES", "1") or 1))


def uuid_of(physical: int) -> bytes:
    return (b"fakemig-" if MIG else b"fakegpu-") + physical.to_bytes(8, "big")


def uuid_text(physical: int) -> str:
    u = uuid_of(physical).hex()
    return f"GPU-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}"


def pci_bus(physical: int) -> int:
    if MIG:
        return 0x18  # every MIG instance reports its parent GPU's bus
    return 0x18 + 0x10 * physical  # distinct buses, spread like a real board's


def _visible():
    count = _physical_count()
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count))
    by_uuid = {uuid_text(p).lower(): p for p in range(count)}
    seen = []
    for entry in (e.strip() for e in spec.split(",")):
        if entry.isdigit() and int(entry) < count:
            physical = int(entry)
        elif entry.lower() in by_uuid:
            physical = by_uuid[entry.lower()]
        else:
            break  # CUDA stops at the first entry it cannot resolve
        if physical in seen:
            break
        seen.append(physical)
    return seen


VISIBLE = _visible()
"""Physical id of each ordinal this process sees."""


def _no_peer():
    pairs = set()
    for item in filter(None, (s.strip() for s in os.environ.get("FAKE_CUPY_NO_PEER", "").split(","))):
        a, b = (int(x) for x in item.split("-"))
        pairs.update({(a, b), (b, a)})
    return pairs


_NO_PEER = _no_peer()
_local = threading.local()


def count() -> int:
    return len(VISIBLE)


def check(ordinal: int) -> int:
    if not isinstance(ordinal, int) or not 0 <= ordinal < len(VISIBLE):
        raise CUDARuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {ordinal} "
                               f"({len(VISIBLE)} visible)")
    return ordinal


def current() -> int:
    return getattr(_local, "device", 0)


def set_current(ordinal: int) -> None:
    _local.device = check(ordinal)


def can_access_peer(ordinal: int, peer: int) -> bool:
    """cudaDeviceCanAccessPeer: never for a device and itself, else unless the pair is listed."""
    check(ordinal), check(peer)
    return ordinal != peer and not MIG and (VISIBLE[ordinal], VISIBLE[peer]) not in _NO_PEER


def check_access(where: str, array_device: int, running_on: int) -> None:
    """CuPy's rule for a kernel on ``running_on`` touching an array of ``array_device``."""
    if array_device != running_on and not can_access_peer(running_on, array_device):
        raise ValueError(f"{where}: the device where the array resides ({array_device}) is different from the "
                         f"current device ({running_on}). Peer access is unavailable between these devices.")


class _Ranges:
    """Address ranges -> device ordinal, for cudaPointerGetAttributes."""

    def __init__(self):
        self._starts = []
        self._spans = {}  # start -> (end, ordinal)
        self._lock = threading.Lock()

    def add(self, start: int, nbytes: int, ordinal: int) -> None:
        with self._lock:
            if start not in self._spans:
                bisect.insort(self._starts, start)
            self._spans[start] = (start + max(1, nbytes), ordinal)

    def remove(self, start: int) -> None:
        with self._lock:
            if self._spans.pop(start, None) is not None:
                self._starts.pop(bisect.bisect_left(self._starts, start))

    def find(self, ptr: int):
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            if i >= 0:
                end, ordinal = self._spans[self._starts[i]]
                if ptr < end:
                    return ordinal
        return None


memory = _Ranges()
