"""The CUDA backend's :class:`~blinkflow.schedule.transport.Transport`: one rank's actions
enqueued on CUDA streams: peer copies into IPC receive slots inside a host, MPI between hosts,
fused reduce-and-forward kernels, and the events that order them across channels and processes.

One stream per channel (per tree, as in Blink §4.2: each tree pipelines independently on its
own links). Within a channel, stream order serialises actions; a dependency on another channel
becomes an event wait; a dependency on a peer becomes a wait on the peer's IPC event.

Inside a host, push (``window`` = the arena's slots): the sender copies its chunk into its slot
in the receiver's arena (a peer copy over NVLink, or the copy engine when ranks share a GPU; for
a pair of GPUs without peer access, into the receiver's pinned host slot, which the receiver
copies up after the READY event),
records its READY event for that slot and posts READY; the receiver waits on that event in the
channel's stream, reduces (or copies) the slot into its buffer — ``recv_reduce_send`` is one
kernel that also writes the parent's slot, and several children's slots fold into one kernel —
records its FREE event and posts FREE. A slot is reused only after its FREE arrived, and each
event is re-recorded only after the peer acknowledged the previous record, so no stream ever
waits on the wrong record. Every wait is on an event recorded earlier in host-causal order, so
the GPU-side waits cannot form a cycle.

Between hosts (``holds``: an ``Isend`` reads the chunk until it completes): the sending rank waits
for its channel's stream to reach the chunk, then MPI sends it (device memory directly under
CUDA-aware MPI, else staged through host memory); the receive is posted before the program
starts and its completion is the READY; the chunk then goes to the device (staged) and into the
same fused kernel as a slot would. Received chunks land in one device inbox kept for the job;
under CUDA-aware MPI, which writes it outside stream order, a program first waits for the
previous one's streams to finish.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from ...ops import ReduceOp
from ...schedule.transport import FREE, READY, Transport
from ..base import Layout
from ..wire import MpiWire
from .ipc import _MEMCPY_DEFAULT, IpcArena
from .launch import reduce_ptrs


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


class CudaTransport(Transport):
    """One rank's transfers; :meth:`prepare` points it at a call's buffer before a program."""

    def __init__(self, wire: MpiWire, layout: Layout, streams: StreamSet, cuda_aware: bool,
                 by_ipc: Optional[Sequence[bool]] = None):
        """``by_ipc[r]``: rank ``r``'s chunks go through the host's IPC arena (default: every
        rank of this host); the others' travel over MPI."""
        import cupy

        self.cupy = cupy
        self.rt = cupy.cuda.runtime
        self.wire = wire
        self.layout = layout
        self.streams = streams
        self.cuda_aware = cuda_aware
        self._local = list(by_ipc) if by_ipc is not None else [layout.same_host(r) for r in range(layout.size)]
        self._local_rank = layout.local_rank_of
        self.arena: Optional[IpcArena] = None
        self.trace: Optional[list] = None
        self._ended: List[object] = []  # the previous program's last work, per channel

    def prepare(self, arena: Optional[IpcArena], buf, dtype: Optional[str], op: Optional[ReduceOp]) -> None:
        """The next program runs on ``buf`` (flat cupy), reducing ``dtype`` (the kernels' name)
        with ``op``."""
        self.arena = arena
        self.buf = buf
        self.base = buf.data.ptr
        self.itemsize = buf.dtype.itemsize
        self.dtype, self.op = dtype, op
        self._step_events: Dict[int, object] = {}
        self._landed: Dict[tuple, object] = {}

    # ---- the runner's questions ----------------------------------------------------------------
    def window(self, peer: int) -> Optional[int]:
        return self.arena.nslots if self._local[peer] else None

    def holds(self, peer: int) -> bool:
        return not self._local[peer]

    def begin(self, program, recv_seqs) -> None:
        self.wire.begin()
        # The buffer was written on the caller's stream: every channel starts after that.
        self._program = program
        self._channels = sorted({a.channel for a in program.actions})
        start = self.cupy.cuda.get_current_stream().record()
        for c in self._channels:
            self.streams[c].wait_event(start)
        remote = [(a, src, seq) for a, seqs in zip(program.actions, recv_seqs)
                  for (src, _), seq in zip(a.inputs, seqs) if not self._local[src]]
        if not remote:
            return
        total = sum(a.count for a, _, _ in remote)
        if self.cuda_aware:
            # MPI writes the inbox outside any stream's order: the previous program's copies out
            # of it must have run (its streams may lag the host, waiting on a slow local peer).
            for event in self._ended:
                event.synchronize()
        device = self._device_inbox(total * self.itemsize).view(self.buf.dtype)[:total]
        host = None if self.cuda_aware else np.empty(total, dtype=self.buf.dtype)
        at = 0
        for a, src, seq in remote:  # program order: MPI matches a (peer, channel)'s receives in order
            landing = device[at:at + a.count]
            staged = landing if host is None else host[at:at + a.count]
            at += a.count
            self._landed[(src, a.channel, seq)] = (landing, staged)
            self.wire.irecv(src, a.channel, seq, staged.view(self.cupy.uint8 if host is None else np.uint8))

    def _device_inbox(self, nbytes: int):
        """Device memory remote chunks land in before they are reduced, kept for the job: the
        kernels that read it run asynchronously, so it must outlive the program. Programs use it
        in stream order (each starts after the previous one's end); growing it waits for the
        device first, so no kernel still reads the old block when it goes back to the pool."""
        inbox = getattr(self, "_inbox", None)
        if inbox is None or inbox.nbytes < nbytes:
            if inbox is not None:
                self.cupy.cuda.Device().synchronize()
            self._inbox = inbox = self.cupy.empty(max(nbytes, 2 * (0 if inbox is None else inbox.nbytes)),
                                                  dtype=self.cupy.uint8)
        return inbox[:nbytes]

    def issue(self, a, recv_seqs, send_seq: int, wait_free: bool, payloads) -> None:
        stream = self.streams[a.channel]
        sp = stream.ptr
        program = self._program
        for d in a.deps:
            ev = self._step_events.get(d)
            if ev is not None and program.actions[d].channel != a.channel:
                stream.wait_event(ev)
        local = self.base + a.offset * self.itemsize
        nbytes = a.count * self.itemsize
        incoming: List[int] = []
        for (src, _), seq in zip(a.inputs, recv_seqs):
            incoming.append(self._incoming(stream, src, a.channel, seq, nbytes))
        outgoing = 0
        staged = False  # the receiver's slot is in host memory: copies reach it, kernels do not
        dst = a.send_to
        if send_seq >= 0 and self._local[dst]:
            slot = send_seq % self.arena.nslots
            outgoing = self.arena.peer_slot(self._local_rank[dst], a.channel, slot)
            staged = self._local_rank[dst] in self.arena.staged_to
            if wait_free:
                self.rt.streamWaitEvent(sp, self.arena.free_at[(self._local_rank[dst], a.channel, slot)], 0)

        d2d = _MEMCPY_DEFAULT
        if a.op == "send":
            if outgoing:
                self.rt.memcpyAsync(outgoing, local, nbytes, d2d, sp)
        elif a.op == "recv":
            self.rt.memcpyAsync(local, incoming[0], nbytes, d2d, sp)
        elif a.op == "recv_send":
            # Forward straight from the slot, so the two copies do not wait on each other.
            if outgoing:
                self.rt.memcpyAsync(outgoing, incoming[0], nbytes, d2d, sp)
            self.rt.memcpyAsync(local, incoming[0], nbytes, d2d, sp)
        elif a.reduces:
            # Fused: local = op(local, inputs...), also written to the parent's slot when forwarding.
            with stream:
                reduce_ptrs(self.dtype, self.op, local, [local] + incoming, a.count, self.itemsize,
                            0 if staged else outgoing)
            if staged and outgoing:
                self.rt.memcpyAsync(outgoing, local, nbytes, d2d, sp)
        elif a.op == "copy":
            self.rt.memcpyAsync(local, self.base + a.src_offset * self.itemsize, nbytes, d2d, sp)

        for (src, _), seq in zip(a.inputs, recv_seqs):
            if self._local[src]:
                self.rt.eventRecord(self.arena.free_mine[(self._local_rank[src], a.channel, seq % self.arena.nslots)], sp)
                self.wire.post(src, FREE, a.channel, seq)
            if self.trace is not None:
                self.trace.append(("recv_reduce" if a.reduces else "recv", src, a.channel, seq, a.offset, a.count))
        if send_seq >= 0:
            if self._local[dst]:
                self.rt.eventRecord(self.arena.ready_mine[(self._local_rank[dst], a.channel, send_seq % self.arena.nslots)], sp)
                self.wire.post(dst, READY, a.channel, send_seq)
            else:
                self._send_remote(stream, dst, a, send_seq)
            if self.trace is not None:
                self.trace.append(("send", dst, a.channel, send_seq, a.offset, a.count))
        if program.cross_stream_deps[a.index]:
            self._step_events[a.index] = stream.record()

    def _incoming(self, stream, src: int, channel: int, seq: int, nbytes: int) -> int:
        """Device address of a received chunk, the stream ordered after its arrival (a chunk
        staged through host memory is first copied up into the device slot)."""
        if self._local[src]:
            slot = seq % self.arena.nslots
            sender = self._local_rank[src]
            self.rt.streamWaitEvent(stream.ptr, self.arena.ready_from[(sender, channel, slot)], 0)
            mine = self.arena.my_slot(sender, channel, slot)
            if sender in self.arena.staged_from:
                self.rt.memcpyAsync(mine, self.arena.staged_slot(sender, channel, slot), nbytes, _MEMCPY_DEFAULT,
                                    stream.ptr)
            return mine
        landing, staged = self._landed.pop((src, channel, seq))
        if staged is not landing:
            landing.set(staged, stream=stream)  # host -> device, in the channel's order
        return landing.data.ptr

    def _send_remote(self, stream, dst: int, a, send_seq: int) -> None:
        """MPI reads the chunk now: wait until the channel computed it, then send (staged)."""
        stream.synchronize()
        chunk = self.buf[a.offset:a.offset + a.count]
        data = chunk.view(self.cupy.uint8) if self.cuda_aware else chunk.get().view(np.uint8)
        self.wire.isend(dst, a.channel, send_seq, data)

    def end(self, program) -> None:
        caller = self.cupy.cuda.get_current_stream()
        self._ended = [self.streams[c].record() for c in self._channels]
        for event in self._ended:
            caller.wait_event(event)

    def poll(self):
        return self.wire.poll()

    def wait(self):
        return self.wire.wait()

    def flush(self) -> None:
        self.wire.flush()
