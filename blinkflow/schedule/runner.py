"""The one runner of the schedule IR: every backend executes every schedule through
:func:`run_program`, over its own :class:`~.transport.Transport`.

Blink pipelines chunks down each tree (§4.2): a rank forwards chunk k while chunk k+1 is still
arriving. So the runner issues an action as soon as it is *allowed* to and lets the transport do
the work (at once on a CPU; enqueued on a stream on a GPU). An action may be issued when

* every action it depends on has been issued (program order, stream order or a local event
  covers the rest),
* for a receive, the sender's transfer of that chunk is ``READY`` (a control message, or an MPI
  receive that completed),
* for a send over a link with receive slots, the destination slot is free: the first ``window``
  transfers of a (peer, channel) pair need nothing, later ones need the receiver's ``FREE`` of
  the transfer that used the same slot before,
* for an action that overwrites what an earlier send still reads (a link that ``holds`` the
  source: a peer reading our buffer in place, an ``Isend`` in flight), that send was released,
* for a send, the previous transfer of its (peer, channel) queue has left: a queue's transfers
  leave in the IR's FIFO order, which MPI's message matching needs (chunks of a queue that
  become ready out of order, e.g. ranges of two cross-host groups, wait for their turn).

Sequence numbers keep counting across calls (:class:`SequenceState`), so a message of the next
call can never be mistaken for one of this call. Before returning, a rank waits until every
transfer it sent was released, so no transfer of this call is left in flight; or, when the
caller owns the buffer and says when it is written next (``defer``), it returns at once and
:func:`settle` waits for those releases just before that write (the CPU backend's two shared
slots alternate, so the wait falls a call later, when the releases have long arrived).

Deadlock-freedom rests on the IR's rounds (every wait points at an earlier round), with one
limit the rounds do not see: receive-slot windows. A schedule that overwrites a range it sent
over a link that holds its source (another host), while a windowed queue (IPC slots inside a GPU
host) feeds that overwrite, can wait in a circle (a 4-rank hand-made schedule does).
Lowered plans never overwrite what they sent to another host; hand-made ones for the cuda
backend must not either.

Event driven, so a program of n actions costs O(n + events) host work: an action waits in
exactly one place at a time (a dependency counter, a READY, a FREE) and moves on when that
resolves. Runnable actions issue lowest index first, i.e. in program order where the order is
free.
"""
from __future__ import annotations

import collections
import heapq
from typing import Any, Dict, List, Optional, Set, Tuple

from ..errors import BackendError
from .program import RankProgram
from .transport import FREE, READY, Transport


class SequenceState:
    """Per (peer, channel) transfer counters and received events, kept across calls."""

    def __init__(self):
        self.sent: Dict[Tuple[int, int], int] = collections.defaultdict(int)
        self.received: Dict[Tuple[int, int], int] = collections.defaultdict(int)
        self.ready: Dict[Tuple[int, int], Dict[int, Any]] = collections.defaultdict(dict)
        """(src, channel) -> {seq: payload of its READY} (the payload says where to read)."""
        self.freed: Dict[Tuple[int, int], Set[int]] = collections.defaultdict(set)
        self.released_below: Dict[Tuple[int, int], int] = collections.defaultdict(int)
        """(dst, channel) -> every transfer with a lower seq was released (earlier calls)."""
        self.unsettled: List[Tuple[Any, Dict[Tuple[int, int], int]]] = []
        """(tag, {(dst, channel): end seq}) of the calls that returned before their sends were
        released (``run_program(defer=tag)``), oldest first."""

    def is_freed(self, key: Tuple[int, int], seq: int) -> bool:
        return seq < self.released_below[key] or seq in self.freed[key]

    def note(self, event: Tuple[int, int, int, int, Any]) -> None:
        kind, peer, channel, seq, payload = event
        if kind == READY:
            self.ready[(peer, channel)][seq] = payload
        elif kind == FREE:
            self.freed[(peer, channel)].add(seq)
        else:
            raise BackendError(f"unknown transfer event {event!r} from rank {peer}")

    def reset(self) -> None:
        """Forget everything (after the transport's slots were rebuilt and every rank synchronised)."""
        self.__init__()


def run_program(program: RankProgram, transport: Transport, state: SequenceState, defer: Any = None) -> None:
    """Issue every action of ``program`` on ``transport`` as early as dependencies, transfers and
    slots allow; return when every action was issued and every send released. With ``defer``
    (a tag naming the buffer), return without waiting for the releases: the caller must
    :func:`settle` the tag before it writes that buffer again or lets it go."""
    actions = program.actions
    sent, received = state.sent, state.received
    send_base = {k: sent[k] for k in program.sends}
    recv_base = {k: received[k] for k in program.recvs}
    windows = {k: transport.window(k[0]) for k in program.sends}
    windowed = any(w is not None for w in windows.values())
    holds = {peer: transport.holds(peer) for peer, _ in program.sends}
    waiting_deps = [len(a.deps) for a in actions]
    dependents = program.dependents
    ready, is_freed = state.ready, state.is_freed
    # Per action: (absolute seqs of its inputs, absolute seq of its send or -1). Most actions
    # have no input or one: this runs for every action of every call.
    seqs = []
    for a in actions:
        keys = a.in_keys
        if not keys:
            rseqs = ()
        elif len(keys) == 1:
            rseqs = (recv_base[keys[0]] + a.inputs[0][1],)
        else:
            rseqs = tuple(recv_base[k] + rel for k, (_, rel) in zip(keys, a.inputs))
        seqs.append((rseqs, send_base[a.send_key] + a.send_seq if a.send_key is not None else -1))
    on_ready: Dict[Tuple[int, int, int], int] = {}  # (src, channel, seq) -> action waiting for it
    on_free: Dict[Tuple[int, int, int], list] = {}  # (dst, channel, seq) -> actions waiting for it
    next_send = dict(send_base)  # (dst, channel) -> the seq whose turn it is on that queue
    on_turn: Dict[Tuple[int, int, int], int] = {}  # (dst, channel, seq) -> action waiting for its turn
    runnable: list = []

    def blocked_on_release(a, sseq: int):
        """The first transfer action ``a`` must see released before it may run, or None."""
        for j in a.releases:
            b = actions[j]
            if holds[b.send_to]:
                key = (b.send_to, b.channel, seqs[j][1])
                if not is_freed(b.send_key, key[2]):
                    return key
        if sseq >= 0 and windowed:
            window = windows[a.send_key]
            if window is not None and sseq >= window and not is_freed(a.send_key, sseq - window):
                return a.send_to, a.channel, sseq - window
        return None

    def advance(i: int) -> None:
        """Dependencies of ``i`` are issued: park it on the first event it lacks, or run it."""
        a = actions[i]
        rseqs, sseq = seqs[i]
        for key, rseq in zip(a.in_keys, rseqs):
            if rseq not in ready[key]:
                on_ready[key + (rseq,)] = i
                return
        if sseq >= 0 and sseq != next_send[a.send_key]:
            on_turn[a.send_key + (sseq,)] = i  # a queue's transfers leave in FIFO order
            return
        key = blocked_on_release(a, sseq) if a.releases or windowed else None
        if key is not None:
            on_free.setdefault(key, []).append(i)
        else:
            heapq.heappush(runnable, i)

    def receive(event) -> None:
        kind, peer, channel, seq, payload = event
        if kind == READY:
            ready[(peer, channel)][seq] = payload
            parked = on_ready.pop((peer, channel, seq), None)
            if parked is not None:
                advance(parked)
        else:
            state.note(event)  # a FREE (or an unknown event, which it refuses)
            for parked in on_free.pop((peer, channel, seq), ()):
                advance(parked)

    transport.begin(program, [rseqs for rseqs, _ in seqs])
    for i, a in enumerate(actions):
        if not a.deps:
            advance(i)
    remaining = len(actions)
    while remaining:
        while runnable:
            i = heapq.heappop(runnable)
            a = actions[i]
            rseqs, sseq = seqs[i]
            if not rseqs:
                payloads = ()
            else:
                payloads = tuple(ready[key].pop(rseq) for key, rseq in zip(a.in_keys, rseqs))
            wait_free = sseq >= 0 and windowed and windows[a.send_key] is not None and sseq >= windows[a.send_key]
            transport.issue(a, rseqs, sseq, wait_free, payloads)
            remaining -= 1
            if sseq >= 0:
                queue = a.send_key
                next_send[queue] = sseq + 1
                waiting = on_turn.pop(queue + (sseq + 1,), None)
                if waiting is not None:
                    advance(waiting)
            for j in dependents[i]:
                waiting_deps[j] -= 1
                if waiting_deps[j] == 0:
                    advance(j)
        if not remaining:
            break
        events = transport.poll()
        if not events and not runnable:
            events = transport.wait()
        for event in events:
            receive(event)
    transport.end(program)

    # Advance the counters, then wait until every receiver released what we sent, so this
    # call leaves no transfer in flight and the next call's first sends find their slots free.
    for key, n in program.sends.items():
        state.sent[key] += n
    for key, n in program.recvs.items():
        state.received[key] += n
    if defer is None:
        _released(state, transport, {key: state.sent[key] for key in program.sends})
    elif program.sends:
        state.unsettled.append((defer, {key: state.sent[key] for key in program.sends}))
    transport.flush()


def settle(state: SequenceState, transport: Transport, tag: Any = None) -> None:
    """Wait for the releases of the deferred calls up to the last one tagged ``tag`` (every
    deferred call when ``tag`` is None); calls after it stay deferred."""
    unsettled = state.unsettled
    upto = len(unsettled)
    if tag is not None:  # the last call tagged ``tag`` (usually the last or the one before)
        while upto and unsettled[upto - 1][0] != tag:
            upto -= 1
    if not upto:
        return
    ends: Dict[Tuple[int, int], int] = {}
    for _, sent in state.unsettled[:upto]:
        ends.update(sent)  # a later call's end seq is higher
    del state.unsettled[:upto]
    _released(state, transport, ends)


def _released(state: SequenceState, transport: Transport, ends: Dict[Tuple[int, int], int]) -> None:
    """Wait until every transfer below ``ends[key]`` on each (dst, channel) was released. It
    starts at what is known released, so an earlier deferred call on the same queue is waited
    for too (``released_below`` may only cover what was released)."""
    for key, last in ends.items():
        seq = state.released_below[key]
        while seq < last:
            if state.is_freed(key, seq):
                seq += 1
                continue
            for event in transport.wait():
                state.note(event)
        if last > state.released_below[key]:
            # Releases below ``last`` are implied from now on; keep the set small.
            state.released_below[key] = last
            state.freed[key] = {s for s in state.freed[key] if s >= last}
