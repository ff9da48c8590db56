"""Receive slots and handshake events shared by the ranks of one host through CUDA IPC.

Every rank allocates one *arena* on its GPU: for each possible sender (local rank), channel
(tree) and slot, ``slot_bytes`` of memory a peer can write into directly (over NVLink when
the GPUs are linked, through the copy engines when they share a GPU). A sender pushes a chunk
into the receiver's slot with a device-to-device copy; the receiver reduces or copies it out
(Blink's executor does the same with its per-link buffers, §4.2).

Cross-process ordering uses interprocess events (``cudaEventInterprocess``): the sender owns
a READY event per (receiver, channel, slot), recorded after its copy; the receiver owns a FREE
event per (sender, channel, slot), recorded after it consumed the slot. The host-side protocol
that makes waiting on them safe lives in ``pipeline``.

The arena is allocated with ``cudaMalloc`` directly, not from CuPy's pool: an IPC handle
names a whole allocation, and a pooled pointer would open at the pool block's start.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from ...errors import BackendError

# cudaEventDisableTiming | cudaEventInterprocess (driver_types.h); IPC events may not time.
_IPC_EVENT_FLAGS = 0x2 | 0x4
# cudaMemcpyDefault: with unified addressing the driver infers the direction, which also covers
# IPC-mapped pointers of another GPU (peer copies).
_MEMCPY_DEFAULT = 4


class IpcArena:
    """The receive slots and events of every rank on this host, opened in this process."""

    def __init__(self, local_comm, nchannels: int, nslots: int, slot_bytes: int):
        from cupy.cuda import runtime

        self.runtime = runtime
        self.comm = local_comm
        self.me = local_comm.rank
        self.nlocal = local_comm.size
        self.nchannels = nchannels
        self.nslots = nslots
        self.slot_bytes = _round_up(max(slot_bytes, 256), 256)  # keep every slot 16-byte aligned
        self._opened_mem: List[int] = []
        self._events: List[int] = []
        self._opened_events: List[int] = []
        self.base = 0
        self.ready_mine: Dict[Tuple[int, int, int], int] = {}  # (receiver, channel, slot)
        self.free_mine: Dict[Tuple[int, int, int], int] = {}  # (sender, channel, slot)
        try:
            self.base = runtime.malloc(self.nbytes)
            for key in ((p, c, s) for p in range(self.nlocal) for c in range(nchannels) for s in range(nslots)):
                if key[0] != self.me:
                    self.ready_mine[key] = self._event()
                    self.free_mine[key] = self._event()
            mine = (runtime.ipcGetMemHandle(self.base),
                    {k: runtime.ipcGetEventHandle(e) for k, e in self.ready_mine.items()},
                    {k: runtime.ipcGetEventHandle(e) for k, e in self.free_mine.items()})
        except Exception as e:
            mine = f"{type(e).__name__}: {e}"
        # Collective over the host: a rank whose setup failed still takes part, so its peers
        # learn about it here instead of hanging in the exchange.
        everyone = local_comm.allgather(mine)
        failed = {p: m for p, m in enumerate(everyone) if isinstance(m, str)}
        if failed:
            self.close()
            raise BackendError(f"cannot set up CUDA IPC receive slots ({self.nbytes} bytes each) on local ranks "
                               + "; ".join(f"{p}: {m}" for p, m in sorted(failed.items())))
        self.peer_base: Dict[int, int] = {}
        self.ready_from: Dict[Tuple[int, int, int], int] = {}  # (sender, channel, slot)
        self.free_at: Dict[Tuple[int, int, int], int] = {}  # (receiver, channel, slot)
        error = None
        try:
            for p, (mem, ready, free) in enumerate(everyone):
                if p == self.me:
                    continue
                self.peer_base[p] = runtime.ipcOpenMemHandle(mem)
                self._opened_mem.append(self.peer_base[p])
                for c in range(nchannels):
                    for s in range(nslots):
                        self.ready_from[(p, c, s)] = self._open_event(ready[(self.me, c, s)])
                        self.free_at[(p, c, s)] = self._open_event(free[(self.me, c, s)])
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        failed = {p: m for p, m in enumerate(local_comm.allgather(error)) if m is not None}
        if failed:
            self.close()
            raise BackendError("cannot open peers' CUDA IPC handles (same host and driver? enough memory?) on local ranks "
                               + "; ".join(f"{p}: {m}" for p, m in sorted(failed.items())))

    @property
    def nbytes(self) -> int:
        return self.nlocal * self.nchannels * self.nslots * self.slot_bytes

    def fits(self, nchannels: int, slot_bytes: int) -> bool:
        return nchannels <= self.nchannels and slot_bytes <= self.slot_bytes

    def _index(self, sender: int, channel: int, slot: int) -> int:
        if channel >= self.nchannels:
            raise BackendError(f"channel {channel} outside the {self.nchannels} the arena was built for")
        return ((sender * self.nchannels + channel) * self.nslots + slot) * self.slot_bytes

    def my_slot(self, sender: int, channel: int, slot: int) -> int:
        """Address of the slot in *my* arena that ``sender`` writes into."""
        return self.base + self._index(sender, channel, slot)

    def peer_slot(self, receiver: int, channel: int, slot: int) -> int:
        """Address (mapped here) of my slot in ``receiver``'s arena."""
        return self.peer_base[receiver] + self._index(self.me, channel, slot)

    def _event(self) -> int:
        e = self.runtime.eventCreateWithFlags(_IPC_EVENT_FLAGS)
        self._events.append(e)
        return e

    def _open_event(self, handle: bytes) -> int:
        e = self.runtime.ipcOpenEventHandle(handle)
        self._opened_events.append(e)
        return e

    def close(self) -> None:
        """Unmap peers' arenas, destroy events, free the arena. Safe to call twice."""
        rt = getattr(self, "runtime", None)
        if rt is None:
            return
        for ptr in self._opened_mem:
            _quietly(rt.ipcCloseMemHandle, ptr)
        for e in self._opened_events + self._events:
            _quietly(rt.eventDestroy, e)
        if self.base:
            _quietly(rt.free, self.base)
        self._opened_mem, self._opened_events, self._events, self.base = [], [], [], 0


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # teardown after a failure: keep releasing the rest
        pass
