"""Receive slots and handshake events shared by the ranks of one host through CUDA IPC.

Every rank allocates one *arena* on its GPU: for each (sender, channel) *link* of the host's
schedules that ends at it and each slot, ``slot_bytes`` of memory a peer can write into
directly (over NVLink when the GPUs are linked, through the copy engines when they share a GPU).
A sender pushes a chunk into the receiver's slot with a device-to-device copy; the receiver
reduces or copies it out (Blink's executor does the same with its per-link buffers, §4.2).
Only the links the schedules use get slots, events and mapped memory: a plan of trees uses few
of a host's pairs, and CUDA maps at most 8 peers into a device.

Where the sender's GPU cannot map the receiver's memory (no peer-to-peer path: a DGX-1's
PCIe-only pairs; past CUDA's peer limit), the link is *staged*: the receiver also keeps the
link's slots in pinned host memory the sender maps, the sender copies its chunk there, and the
receiver copies it up into its device slot after the READY event (:mod:`.peers` decides).

Cross-process ordering uses interprocess events (``cudaEventInterprocess``): the sender owns
a READY event per (receiver, channel, slot), recorded after its copy; the receiver owns a FREE
event per (sender, channel, slot), recorded after it consumed the slot. The host-side protocol
that makes waiting on them safe lives in ``pipeline``.

The arena is allocated with ``cudaMalloc`` directly, not from CuPy's pool: an IPC handle
names a whole allocation, and a pooled pointer would open at the pool block's start.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Set, Tuple

from ...errors import BackendError
from ..teardown import quietly
from .peers import PeerRoutes

# cudaEventDisableTiming | cudaEventInterprocess (driver_types.h); IPC events may not time.
_IPC_EVENT_FLAGS = 0x2 | 0x4
# cudaMemcpyDefault: with unified addressing the driver infers the direction, which also covers
# IPC-mapped pointers of another GPU (peer copies).
_MEMCPY_DEFAULT = 4
_HOST_REGISTER_PORTABLE = 0x1  # cudaHostRegisterPortable: pinned for every context of the process


class IpcArena:
    """The receive slots and events of the ``links`` ((sender, receiver, channel) in local
    ranks, the same set on every local rank) that touch this rank, opened in this process."""

    def __init__(self, local_comm, links, nslots: int, slot_bytes: int, routes: PeerRoutes):
        from cupy.cuda import runtime

        self.runtime = runtime
        self.comm = local_comm
        self.me = local_comm.rank
        self.links = frozenset(links)
        self.nchannels = 1 + max((c for _, _, c in self.links), default=0)
        self.nslots = nslots
        self.slot_bytes = _round_up(max(slot_bytes, 256), 256)  # keep every slot 16-byte aligned
        # A receiver's arena holds its incoming links' blocks of slots, in sorted order.
        self._block: Dict[Tuple[int, int, int], int] = {}
        for receiver in {r for _, r, _ in self.links}:
            for i, (s, c) in enumerate(sorted((s, c) for s, r, c in self.links if r == receiver)):
                self._block[(s, receiver, c)] = i
        incoming = [(s, c) for s, r, c in self.links if r == self.me]
        outgoing = [(r, c) for s, r, c in self.links if s == self.me]
        self._opened_mem: List[int] = []
        self._events: List[int] = []
        self._opened_events: List[int] = []
        self._host: List[object] = []  # shared-memory segments: mine (staging for my senders) and peers'
        self._registered: List[int] = []
        self.base = 0
        self.staged_to: Set[int] = set()  # receivers this rank writes through host memory
        self.peer_base: Dict[int, int] = {}
        self.ready_mine: Dict[Tuple[int, int, int], int] = {}  # (receiver, channel, slot)
        self.free_mine: Dict[Tuple[int, int, int], int] = {}  # (sender, channel, slot)
        self.ready_from: Dict[Tuple[int, int, int], int] = {}  # (sender, channel, slot)
        self.free_at: Dict[Tuple[int, int, int], int] = {}  # (receiver, channel, slot)
        self._staged_base: Dict[int, int] = {}  # me -> my host staging slots' base (senders: peer_base)
        self._own_host = None
        self.staged_from: Set[int] = set()  # senders that write to me through host memory
        try:
            self._exchange(runtime, routes, incoming, outgoing)
        except BaseException:
            self.close()
            raise

    def _exchange(self, runtime, routes: PeerRoutes, incoming, outgoing) -> None:
        nbytes = max(1, len(incoming)) * self.nslots * self.slot_bytes
        try:
            self.base = runtime.malloc(nbytes)
            for r, c in outgoing:
                for s in range(self.nslots):
                    self.ready_mine[(r, c, s)] = self._event()
            for snd, c in incoming:
                for s in range(self.nslots):
                    self.free_mine[(snd, c, s)] = self._event()
            mine = (runtime.ipcGetMemHandle(self.base), routes.gpu,
                    {k: runtime.ipcGetEventHandle(e) for k, e in self.ready_mine.items()},
                    {k: runtime.ipcGetEventHandle(e) for k, e in self.free_mine.items()})
        except Exception as e:
            mine = f"{type(e).__name__}: {e}"
        # Collective over the host: a rank whose setup failed still takes part, so its peers
        # learn about it here instead of hanging in the exchange.
        everyone = self.comm.allgather(mine)
        self._raise_failed(everyone, f"cannot set up CUDA IPC receive slots ({nbytes} bytes) on local ranks ")
        # Map the receivers' memory where this GPU can; stage where it cannot.
        error = None
        try:
            for r in sorted({r for r, _ in outgoing}):
                handle, gpu = everyone[r][0], everyone[r][1]
                verdict = routes.can_map(gpu)
                if verdict is not False:
                    try:
                        self.peer_base[r] = runtime.ipcOpenMemHandle(handle)
                        self._opened_mem.append(self.peer_base[r])
                        routes.mapped(gpu)
                        continue
                    except Exception:
                        if verdict:  # CUDA said it can: a real failure
                            raise
                self.staged_to.add(r)
            for snd, c in incoming:
                for s in range(self.nslots):
                    self.ready_from[(snd, c, s)] = self._open_event(everyone[snd][2][(self.me, c, s)])
            for r, c in outgoing:
                for s in range(self.nslots):
                    self.free_at[(r, c, s)] = self._open_event(everyone[r][3][(self.me, c, s)])
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        staged = self.comm.allgather(error if error is not None else sorted(self.staged_to))
        self._raise_failed(staged, "cannot open peers' CUDA IPC handles (same host and driver? enough memory?) "
                                   "on local ranks ")
        # Host staging slots for the senders that cannot map my memory, laid out like my arena.
        error, name = None, None
        try:
            if any(self.me in theirs for theirs in staged):
                name = self._share_host(nbytes)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        answers = self.comm.allgather((error, name))
        self._raise_failed([e for e, _ in answers], "cannot set up pinned host staging slots on local ranks ")
        try:
            for r in sorted(self.staged_to):
                self.peer_base[r] = self._attach_host(answers[r][1])
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        self._raise_failed(self.comm.allgather(error), "cannot map peers' host staging slots on local ranks ")
        self.staged_from = {s for s, theirs in enumerate(staged) if self.me in theirs}

    def _raise_failed(self, answers, what: str) -> None:
        failed = {p: m for p, m in enumerate(answers) if isinstance(m, str)}
        if failed:
            raise BackendError(what + "; ".join(f"{p}: {m}" for p, m in sorted(failed.items())))

    def _share_host(self, nbytes: int) -> str:
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(create=True, size=nbytes)
        self._host.append(shm)
        self._own_host = shm
        self._staged_base[self.me] = self._pin(shm)
        return shm.name

    def _attach_host(self, name: str) -> int:
        from multiprocessing import resource_tracker, shared_memory

        shm = shared_memory.SharedMemory(name=name)
        try:
            resource_tracker.unregister(shm._name, "shared_memory")  # its creator unlinks it
        except Exception:
            pass
        self._host.append(shm)
        return self._pin(shm)

    def _pin(self, shm) -> int:
        """Page-lock a shared segment for asynchronous copies; its address."""
        import ctypes

        address = ctypes.addressof(ctypes.c_char.from_buffer(shm.buf))
        self.runtime.hostRegister(address, shm.size, _HOST_REGISTER_PORTABLE)
        self._registered.append(address)
        return address

    @property
    def nbytes(self) -> int:
        return max(1, sum(1 for _, r, _ in self.links if r == self.me)) * self.nslots * self.slot_bytes

    def _index(self, sender: int, receiver: int, channel: int, slot: int) -> int:
        block = self._block.get((sender, receiver, channel))
        if block is None:
            raise BackendError(f"no receive slots for local rank {sender} -> {receiver} on channel {channel}: "
                               "the arena was built for other schedules")
        return (block * self.nslots + slot) * self.slot_bytes

    def my_slot(self, sender: int, channel: int, slot: int) -> int:
        """Address of the slot in *my* arena that ``sender`` writes into."""
        return self.base + self._index(sender, self.me, channel, slot)

    def staged_slot(self, sender: int, channel: int, slot: int) -> int:
        """Address of the host slot ``sender`` (which cannot map my memory) writes into."""
        return self._staged_base[self.me] + self._index(sender, self.me, channel, slot)

    def peer_slot(self, receiver: int, channel: int, slot: int) -> int:
        """Address (mapped here) of my slot in ``receiver``'s arena: on its GPU, or in its host
        staging slots when the link is staged."""
        return self.peer_base[receiver] + self._index(self.me, receiver, channel, slot)

    def _event(self) -> int:
        e = self.runtime.eventCreateWithFlags(_IPC_EVENT_FLAGS)
        self._events.append(e)
        return e

    def _open_event(self, handle: bytes) -> int:
        e = self.runtime.ipcOpenEventHandle(handle)
        self._opened_events.append(e)
        return e

    def close(self) -> None:
        """Unmap peers' arenas, destroy events, free the arena and the host slots. Safe twice."""
        rt = getattr(self, "runtime", None)
        if rt is None:
            return
        for ptr in self._opened_mem:
            quietly(rt.ipcCloseMemHandle, ptr)
        for e in self._opened_events + self._events:
            quietly(rt.eventDestroy, e)
        for address in self._registered:
            quietly(rt.hostUnregister, address)
        for shm in self._host:
            quietly(shm.close)
            if shm is self._own_host:
                quietly(shm.unlink)
        if self.base:
            quietly(rt.free, self.base)
        self._opened_mem, self._opened_events, self._events, self.base = [], [], [], 0
        self._host, self._registered, self._own_host = [], [], None


def local_links(schedule, local_rank_of, on_this_host) -> FrozenSet[Tuple[int, int, int]]:
    """(sender, receiver, channel) in local ranks of every transfer of ``schedule`` inside this
    host (every rank holds the whole schedule, so every local rank computes the same set).
    ``local_rank_of`` and ``on_this_host`` take the schedule's device ids."""
    return frozenset((local_rank_of(d), local_rank_of(step.destination), step.channel)
                     for d, steps in schedule.programs if on_this_host(d)
                     for step in steps if step.destination is not None and on_this_host(step.destination))


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to
