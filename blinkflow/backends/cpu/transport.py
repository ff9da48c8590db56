"""The CPU backend's :class:`~blinkflow.schedule.transport.Transport`: numpy over shared memory
inside a host, MPI point-to-point between hosts.

Inside a host a transfer is a *pull* (the schedule IR allows it: a sent range is not overwritten
before its receiver is done with it): the sender's buffer sits in a shared window (:mod:`.shm`),
its READY says where, and the receiver combines or copies the chunk straight out of the sender's
memory, then says FREE. No byte is copied into a mailbox, as in Blink's and NCCL's intra-node
paths with peer-mapped memory. Between hosts the chunk itself travels as an MPI message: the
receive is posted before the program starts, its completion is the READY, the completion of the
sender's ``Isend`` its FREE.

Out-of-place results: when the caller gives ``out`` (the runtime's private result), a receive
that is the last word on its range writes straight into ``out``, scaled on the way, and the
ranges no such receive writes are copied out as soon as nothing touches them any more (right
after the action that touched them last: the copy overlaps the waits for peers that follow),
the rest at the end; one pass over the data fewer than reducing in place and copying the whole
buffer out.

``trace``, when a list, gets one ``(op, peer, channel, seq, offset, count)`` per transfer as it runs
("send", "recv" or "recv_reduce"): the test that what runs is the lowered schedule reads it.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...errors import BackendError
from ...scaling import scaled_copy
from ...schedule.transport import FREE, READY, Event, Transport
from ..base import Layout
from ..wire import MpiWire
from . import kernels
from .shm import SharedArena


class Scratch:
    """A private buffer that grows geometrically and is never freed per call."""

    def __init__(self):
        self._buf = np.empty(0, dtype=np.uint8)

    def get(self, count: int, dtype) -> np.ndarray:
        nbytes = count * np.dtype(dtype).itemsize
        if self._buf.nbytes < nbytes:
            self._buf = np.empty(max(nbytes, 2 * self._buf.nbytes), dtype=np.uint8)
        return self._buf[:nbytes].view(dtype)


class CpuTransport(Transport):
    """One backend's transfers; :meth:`prepare` points it at a call's buffer before a program."""

    def __init__(self, wire: MpiWire, layout: Layout, arena: SharedArena, trace: Optional[list] = None):
        self.wire = wire
        self.layout = layout
        self.arena = arena
        self.inbox = Scratch()  # receives from other hosts land there
        self.trace = trace
        self._local = [layout.same_host(r) for r in range(layout.size)]
        self._local_rank = layout.local_rank_of
        self.buf: Optional[np.ndarray] = None
        self.out: Optional[np.ndarray] = None
        self._reach_of: dict = {}  # id(program) -> (program, _reach(program))

    def prepare(self, buf: np.ndarray, ufunc, out: Optional[np.ndarray], scale: float,
                chunk: int) -> Tuple[int, int]:
        """The next program runs on ``buf`` (combining with ``ufunc``); with ``out`` its result
        lands there, times ``scale``. Returns where ``buf`` lies (``SharedArena.locate``)."""
        self.buf, self.ufunc, self.out, self.scale, self.chunk = buf, ufunc, out, scale, chunk
        self.itemsize = buf.dtype.itemsize
        self._where = self.arena.locate(buf)
        self._landed: dict = {}
        self._peers: dict = {}  # rank -> (READY payload, that peer's buffer there, typed): see _incoming
        return self._where

    # ---- the runner's questions ----------------------------------------------------------------
    def window(self, peer: int) -> Optional[int]:
        return None  # no receive slots: peers read our buffer, or MPI buffers the message

    def local_only(self, program) -> bool:
        """Whether ``program`` sends only to ranks of this host (its releases are messages)."""
        return self._reach(program)[0]

    def _reach(self, program) -> Tuple[bool, bool, bool]:
        """(whether ``program`` sends only inside this host, whether it sends to some rank of this
        host, whether it receives only from this host), worked out once per program (the
        backend's program cache keeps the few a job runs)."""
        known = self._reach_of.get(id(program))
        if known is not None and known[0] is program:  # (an id can be reused once a program is gone)
            return known[1]
        facts = (all(self._local[dst] for dst, _ in program.sends), any(self._local[dst] for dst, _ in program.sends),
                 all(self._local[src] for src, _ in program.recvs))
        if len(self._reach_of) >= 64:
            self._reach_of.clear()
        self._reach_of[id(program)] = (program, facts)
        return facts

    def holds(self, peer: int) -> bool:
        return True  # a peer reads our range in place, or an Isend still reads it

    def begin(self, program, recv_seqs: Sequence[Tuple[int, ...]]) -> None:
        self.wire.begin()
        self._nelems = program.nelems
        _, sends_here, receives_here_only = self._reach(program)
        if self._where[0] < 0 and sends_here:
            raise BackendError("a buffer peers read in place must sit in a shared window (Backend.buffer)")
        if receives_here_only:
            return  # inside a host every chunk is read in place: nothing to post
        remote = [(a, src, seq) for a, seqs in zip(program.actions, recv_seqs)
                  for (src, _), seq in zip(a.inputs, seqs) if not self._local[src]]
        if not remote:
            return
        space = self.inbox.get(sum(a.count for a, _, _ in remote), self.buf.dtype)
        at = 0
        for a, src, seq in remote:  # program order: MPI matches a (peer, channel)'s receives in order
            landing = space[at:at + a.count]
            at += a.count
            self._landed[(src, a.channel, seq)] = landing
            self.wire.irecv(src, a.channel, seq, landing.view(np.uint8))

    def issue(self, a, recv_seqs, send_seq: int, wait_free: bool, payloads) -> None:
        buf = self.buf
        lo, hi = a.offset, a.offset + a.count
        if a.op == "copy":
            np.copyto(buf[lo:hi], buf[a.src_offset:a.src_offset + a.count])
        elif a.inputs:
            incoming = [self._incoming(src, a, seq, payload) for (src, _), seq, payload in zip(a.inputs, recv_seqs, payloads)]
            into_out = a.final and self.out is not None
            target = self.out[lo:hi] if into_out else buf[lo:hi]
            if a.reduces:
                kernels.reduce_into(target, [buf[lo:hi]] + incoming, self.ufunc, self.chunk)
                if into_out and self.scale != 1.0:
                    scaled_copy(target, target, self.scale)
            else:
                scaled_copy(incoming[0], target, self.scale if into_out else 1.0)
            for (src, _), seq in zip(a.inputs, recv_seqs):
                if self._local[src]:
                    self.wire.post(src, FREE, a.channel, seq)
                if self.trace is not None:
                    self.trace.append(("recv_reduce" if a.reduces else "recv", src, a.channel, seq, lo, a.count))
        if send_seq >= 0:
            dst = a.send_to
            if self._local[dst]:
                self.wire.post(dst, READY, a.channel, send_seq, self._where)
            else:
                self.wire.isend(dst, a.channel, send_seq, buf[lo:hi].view(np.uint8))
            if self.trace is not None:
                self.trace.append(("send", dst, a.channel, send_seq, lo, a.count))
        if a.copy_out and self.out is not None:
            # After the send: a peer waiting for it starts while we copy (the value is final).
            for c_lo, c_hi in a.copy_out:
                scaled_copy(buf[c_lo:c_hi], self.out[c_lo:c_hi], self.scale)

    def _incoming(self, src: int, a, seq: int, payload) -> np.ndarray:
        if not self._local[src]:
            return self._landed.pop((src, a.channel, seq))
        # A program reads each peer's buffer at one place (its READYs all carry the same payload):
        # the typed view of it is made once per call, and each chunk is one slice of it.
        theirs = self._peers.get(src)
        if theirs is None or theirs[0] != payload:
            window, base = payload
            theirs = self._peers[src] = (payload, self.arena.peer_view(window, self._local_rank[src], base,
                                                                       self._nelems, self.buf.dtype))
        return theirs[1][a.offset:a.offset + a.count]

    def end(self, program) -> None:
        if self.out is not None:
            for lo, hi in program.untouched:
                scaled_copy(self.buf[lo:hi], self.out[lo:hi], self.scale)

    def poll(self) -> List[Event]:
        return self.wire.poll()

    def wait(self) -> List[Event]:
        return self.wire.wait()

    def flush(self) -> None:
        self.wire.flush()
        self.buf = self.out = None
