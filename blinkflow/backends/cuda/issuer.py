"""Enqueue one rank's actions on CUDA streams: peer copies, fused reduce-and-forward kernels,
and the event waits/records that order them across channels and processes.

One stream per channel (per tree, as in Blink §4.2: each tree pipelines independently on its
own links). Within a channel, stream order serialises actions; a dependency on another channel
becomes an event wait; a dependency on a peer becomes a wait on the peer's IPC event.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from ...ops import ReduceOp
from .ipc import IpcArena, _MEMCPY_DEFAULT
from .launch import reduce_ptrs
from .pipeline import Issuer
from .program import Action, RankProgram


class StreamSet:
    """The channel streams of one rank, created on first use and kept for the job."""

    def __init__(self):
        self._streams: Dict[int, object] = {}

    def __getitem__(self, channel: int):
        import cupy

        s = self._streams.get(channel)
        if s is None:
            s = self._streams[channel] = cupy.cuda.Stream(non_blocking=True)
        return s

    def close(self) -> None:
        self._streams.clear()


class CupyIssuer(Issuer):
    """Issues actions of one program on one buffer (a flat cupy array)."""

    def __init__(self, arena: IpcArena, streams: StreamSet, buf, dtype: str, op: Optional[ReduceOp]):
        import cupy

        self.cupy = cupy
        self.rt = cupy.cuda.runtime
        self.arena = arena
        self.nslots = arena.nslots
        self.streams = streams
        self.base = buf.data.ptr
        self.itemsize = buf.dtype.itemsize
        self.dtype = dtype
        self.op = op
        self._step_events: Dict[int, object] = {}
        self._channels: List[int] = []

    def begin(self, program: RankProgram) -> None:
        # The buffer was written on the caller's stream: every channel starts after that.
        self._program = program
        self._channels = sorted({a.channel for a in program.actions})
        start = self.cupy.cuda.get_current_stream().record()
        for c in self._channels:
            self.streams[c].wait_event(start)

    def issue(self, a: Action, recv_seq: int, send_seq: int, wait_free: bool) -> None:
        stream = self.streams[a.channel]
        sp = stream.ptr
        for d in a.deps:
            ev = self._step_events.get(d)
            if ev is not None and self._program.actions[d].channel != a.channel:
                stream.wait_event(ev)
        local = self.base + a.offset * self.itemsize
        nbytes = a.count * self.itemsize
        incoming = outgoing = 0
        if recv_seq >= 0:
            slot = recv_seq % self.nslots
            incoming = self.arena.my_slot(a.recv_from, a.channel, slot)
            self.rt.streamWaitEvent(sp, self.arena.ready_from[(a.recv_from, a.channel, slot)], 0)
        if send_seq >= 0:
            slot = send_seq % self.nslots
            outgoing = self.arena.peer_slot(a.send_to, a.channel, slot)
            if wait_free:
                self.rt.streamWaitEvent(sp, self.arena.free_at[(a.send_to, a.channel, slot)], 0)

        d2d = _MEMCPY_DEFAULT
        if a.op == "send":
            self.rt.memcpyAsync(outgoing, local, nbytes, d2d, sp)
        elif a.op == "recv":
            self.rt.memcpyAsync(local, incoming, nbytes, d2d, sp)
        elif a.op == "recv_send":
            # Forward straight from the slot, so the two copies do not wait on each other.
            self.rt.memcpyAsync(outgoing, incoming, nbytes, d2d, sp)
            self.rt.memcpyAsync(local, incoming, nbytes, d2d, sp)
        elif a.op in ("recv_reduce", "recv_reduce_send"):
            # Fused: local = op(local, slot), also written to the parent's slot when forwarding.
            with stream:
                reduce_ptrs(self.dtype, self.op, local, (local, incoming), a.count, self.itemsize, outgoing)
        elif a.op == "copy":
            self.rt.memcpyAsync(local, self.base + a.src_offset * self.itemsize, nbytes, d2d, sp)

        if recv_seq >= 0:
            self.rt.eventRecord(self.arena.free_mine[(a.recv_from, a.channel, recv_seq % self.nslots)], sp)
        if send_seq >= 0:
            self.rt.eventRecord(self.arena.ready_mine[(a.send_to, a.channel, send_seq % self.nslots)], sp)
        if self._program.cross_stream_deps[a.index]:
            self._step_events[a.index] = stream.record()

    def end(self, program: RankProgram) -> None:
        caller = self.cupy.cuda.get_current_stream()
        for c in self._channels:
            caller.wait_event(self.streams[c].record())
