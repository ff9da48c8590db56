"""The per-rank event loop that issues a :class:`RankProgram` (no CuPy, no MPI here).

Blink pipelines chunks down each tree (§4.2): a rank forwards chunk k while chunk k+1 is still
arriving. On GPUs that means the host issues work as soon as it is *allowed* to, and the GPU
streams do the waiting. An action may be issued when

* every action it depends on has been issued (stream order or a local event covers the rest),
* for a receive, the sender has said that chunk's copy is *enqueued* (a ``READY`` message; the
  GPU-side wait is on the sender's IPC event, recorded before the message left), and
* for a send, the destination slot is free: the first ``nslots`` transfers of a (peer, channel)
  pair ever need nothing; later ones need the receiver's ``FREE`` for the transfer that used
  the same slot before (and the GPU waits on the receiver's IPC event for it).

Each slot's event is re-recorded only after the peer has acknowledged the previous use, so a
``cudaStreamWaitEvent`` can never see a later record than the one it was meant for.

Sequence numbers keep counting across calls (``SequenceState``), so slots are never reused
without that handshake, even across collectives. Before returning, a rank waits for the
``FREE`` of every transfer it sent, so no message of this call is left in flight.

The loop is generic over two small interfaces so the CPU suite can run it with a fake device:
a :class:`Messenger` (MPI in production) and an :class:`Issuer` (CuPy streams in production).
"""
from __future__ import annotations

import abc
import collections
import heapq
from typing import Dict, Iterable, Set, Tuple

from ...errors import BackendError
from .program import Action, RankProgram

READY = 1
FREE = 2


class Messenger(abc.ABC):
    """Small control messages between the ranks of one host."""

    @abc.abstractmethod
    def post(self, dst: int, kind: int, channel: int, seq: int) -> None:
        """Send ``(kind, my rank, channel, seq)`` to ``dst`` without blocking."""

    @abc.abstractmethod
    def wait(self) -> Tuple[int, int, int, int]:
        """Block until a message arrives; return ``(kind, src, channel, seq)``."""

    @abc.abstractmethod
    def poll(self) -> Iterable[Tuple[int, int, int, int]]:
        """Messages that have already arrived (never blocks)."""

    def flush(self) -> None:
        """Complete outstanding sends (called at the end of every collective)."""


class Issuer(abc.ABC):
    """Enqueues the device work of one action (asynchronously, in production)."""

    nslots: int

    def begin(self, program: RankProgram) -> None:
        """Called before the first action (order channel streams after the caller's stream)."""

    @abc.abstractmethod
    def issue(self, action: Action, recv_seq: int, send_seq: int, wait_free: bool) -> None:
        """Enqueue ``action``. ``recv_seq``/``send_seq`` are absolute sequence numbers (or -1);
        ``wait_free`` asks the GPU to wait for the peer's release of the destination slot."""

    def end(self, program: RankProgram) -> None:
        """Called after the last action (order the caller's stream after the channel streams)."""


class SequenceState:
    """Per (peer, channel) transfer counters and received control messages, kept across calls."""

    def __init__(self):
        self.sent: Dict[Tuple[int, int], int] = collections.defaultdict(int)
        self.received: Dict[Tuple[int, int], int] = collections.defaultdict(int)
        self.ready: Dict[Tuple[int, int], Set[int]] = collections.defaultdict(set)
        self.freed: Dict[Tuple[int, int], Set[int]] = collections.defaultdict(set)

    def note(self, message: Tuple[int, int, int, int]) -> None:
        kind, src, channel, seq = message
        if kind == READY:
            self.ready[(src, channel)].add(seq)
        elif kind == FREE:
            self.freed[(src, channel)].add(seq)
        else:
            raise BackendError(f"unknown control message {message!r} from rank {src}")

    def reset(self) -> None:
        """Forget everything (after the slots were reallocated and every rank synchronised)."""
        self.__init__()


def run_program(program: RankProgram, issuer: Issuer, messenger: Messenger, state: SequenceState) -> None:
    """Issue every action of ``program`` as early as its dependencies and slots allow.

    Event driven, so a program of n actions costs O(n + messages) host work: an action waits
    in exactly one place at a time: on its unissued dependencies (a counter), on a READY (keyed
    by the transfer it needs) or on a FREE (keyed likewise), and moves on when that resolves.
    Runnable actions issue lowest index first, i.e. in program order where the order is free.
    """
    actions = program.actions
    nslots = issuer.nslots
    send_base = {k: state.sent[k] for k in program.sends}
    recv_base = {k: state.received[k] for k in program.recvs}
    waiting_deps = [len(a.deps) for a in actions]
    dependents = program.dependents
    seqs = []
    for a in actions:
        rseq = recv_base[(a.recv_from, a.channel)] + a.recv_seq if a.recv_from is not None else -1
        sseq = send_base[(a.send_to, a.channel)] + a.send_seq if a.send_to is not None else -1
        seqs.append((rseq, sseq))
    on_ready: Dict[Tuple[int, int, int], int] = {}  # (src, channel, seq) -> action waiting for it
    on_free: Dict[Tuple[int, int, int], int] = {}  # (dst, channel, seq) -> action waiting for it
    runnable = [a.index for a in actions if not a.deps]
    heapq.heapify(runnable)

    def advance(i: int) -> None:
        """Dependencies of ``i`` are issued: park it on the first message it lacks, or run it."""
        a = actions[i]
        rseq, sseq = seqs[i]
        if rseq >= 0 and rseq not in state.ready[(a.recv_from, a.channel)]:
            on_ready[(a.recv_from, a.channel, rseq)] = i
        elif sseq >= nslots and (sseq - nslots) not in state.freed[(a.send_to, a.channel)]:
            on_free[(a.send_to, a.channel, sseq - nslots)] = i
        else:
            heapq.heappush(runnable, i)

    def receive(message) -> None:
        state.note(message)
        kind, src, channel, seq = message
        parked = (on_ready if kind == READY else on_free).pop((src, channel, seq), None)
        if parked is not None:
            advance(parked)

    pending = list(runnable)
    runnable = []
    for i in pending:
        advance(i)
    issuer.begin(program)
    remaining = len(actions)
    while remaining:
        while runnable:
            i = heapq.heappop(runnable)
            a = actions[i]
            rseq, sseq = seqs[i]
            issuer.issue(a, rseq, sseq, wait_free=sseq >= nslots)
            remaining -= 1
            if rseq >= 0:
                state.ready[(a.recv_from, a.channel)].discard(rseq)
                messenger.post(a.recv_from, FREE, a.channel, rseq)
            if sseq >= 0:
                messenger.post(a.send_to, READY, a.channel, sseq)
            for j in dependents[i]:
                waiting_deps[j] -= 1
                if waiting_deps[j] == 0:
                    advance(j)
        if not remaining:
            break
        arrived = messenger.poll()
        for message in arrived:
            receive(message)
        if not arrived and not runnable:
            receive(messenger.wait())
    issuer.end(program)

    # Advance the counters, then wait until every receiver released what we sent, so this
    # call leaves no message behind and the next call's first sends find their slots free.
    for key, n in program.sends.items():
        state.sent[key] += n
    for key, n in program.recvs.items():
        state.received[key] += n
    for key in program.sends:
        last = state.sent[key]
        while not all(s in state.freed[key] for s in range(max(0, last - nslots), last)):
            state.note(messenger.wait())
        # Older releases are implied by these (a slot is released in order); drop them.
        state.freed[key] = {s for s in state.freed[key] if s >= last - nslots}
    messenger.flush()
