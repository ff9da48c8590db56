"""MPI under both backends' transports: control messages inside a host, data between hosts.

MPI carries control messages (small: six int64s, the sender's rank among them) and data moves by the
fastest path there is: inside a host through shared memory (CPU) or NVLink / IPC (GPU), where
the READY / FREE messages below are all MPI carries; between hosts MPI carries the chunks
themselves (:meth:`MpiWire.isend` / :meth:`MpiWire.irecv`), and their completions are the
READY / FREE events of those transfers.

Everything goes over one communicator the backend duplicated for its transport, so it can never
match another layer's messages; data travels with tag ``DATA_TAG + channel`` so MPI's
non-overtaking rule per (source, tag) gives the schedule IR's FIFO matching per (peer, channel).
Given a *mailbox* (the CPU backend's :mod:`.cpu.mailbox`, rings in shared memory), control
messages go through it instead (every control message goes to a rank of this host: the
transports' rule), except one whose ring is full: that one goes over MPI as before, so posting
never waits for the receiver, and the control receive is tested only while the mailbox says
such messages are due. The runner needs no order among control messages (a READY is filed under
its sequence number, a FREE in a set), so the two paths may interleave.
"""
from __future__ import annotations

import collections
from typing import Any, Deque, List, Tuple

import numpy as np

from ..schedule.transport import FREE, READY, Event
from . import quiet_wait, teardown

CONTROL_TAG = 0xB1
#: Pending control sends at which the wire first tests them all (see :meth:`MpiWire._reap`).
REAP_AT = 256
DATA_TAG = 0x100
#: How long a wait inside a running program tests before it sleeps (see :meth:`MpiWire.wait`).
ENGAGED_SPIN_S = 2e-3


class MpiWire:
    """Events of one backend's transfers, in the runner's vocabulary (``schedule.transport``)."""

    def __init__(self, comm, mailbox=None, failure=None):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm  # a Dup() owned by the backend
        self.mailbox = mailbox
        self.failure = failure
        """Asked between waits: a peer found gone ends the wait with its error (a message in a
        peer's shared-memory ring, unlike an MPI request, never reports the peer's death)."""
        self._sent: Deque[Tuple[Any, np.ndarray]] = collections.deque()  # control Isends and their buffers, oldest first
        self._reap_at = REAP_AT
        self._inbox = np.empty(6, dtype=np.int64)
        self.rank = comm.Get_rank()
        # Posted with a mailbox too: the messages its full rings spill come this way.
        self._control = self.comm.Irecv(self._inbox, source=MPI.ANY_SOURCE, tag=CONTROL_TAG)
        self._requests: List[Any] = [self._control]  # [0] is always the control receive
        self._control_received = 0  # control messages that came over MPI (with a mailbox: spilled ones)
        self._meaning: List[Event] = [None]  # the event each data request's completion is
        self._buffers: List[Any] = [None]  # kept alive until the request completes
        self._heard = False
        """Whether a peer's event of the current program has arrived (see :meth:`wait`)."""

    def begin(self) -> None:
        """A program starts: until a peer's event arrives, its peers may still be computing."""
        self._heard = False

    # ---- sending -----------------------------------------------------------------------------
    def post(self, dst: int, kind: int, channel: int, seq: int, payload: Tuple[int, int] = (0, 0)) -> None:
        """Send a control message (READY or FREE) to rank ``dst``; never blocks. Through the
        mailbox when there is one and its ring to ``dst`` has room, else over MPI."""
        mailbox = self.mailbox
        if mailbox is not None:
            if mailbox.post(dst, (kind, self.rank, channel, seq, payload[0], payload[1])):
                return
            self._isend_control(dst, kind, channel, seq, payload)
            mailbox.spilled(dst)  # after the send: the receiver looks for it from now on
            return
        self._isend_control(dst, kind, channel, seq, payload)

    def _isend_control(self, dst: int, kind: int, channel: int, seq: int, payload: Tuple[int, int]) -> None:
        msg = np.array([kind, self.rank, channel, seq, payload[0], payload[1]], dtype=np.int64)
        self._sent.append((self.comm.Isend(msg, dest=dst, tag=CONTROL_TAG), msg))
        if len(self._sent) >= self._reap_at:
            self._reap()

    def _reap(self) -> None:
        """Drop the control sends that completed (testing them also moves the others on). The
        next reap comes when the list has doubled, so a receiver that reads nothing for a while
        (thousands of sends pending) costs amortised constant time per send, not a test of every
        pending one per send."""
        done = self.MPI.Request.Testsome([r for r, _ in self._sent], statuses=None) or ()
        if done:
            finished = set(done)
            self._sent = collections.deque(s for i, s in enumerate(self._sent) if i not in finished)
        self._reap_at = max(REAP_AT, 2 * len(self._sent))

    def isend(self, dst: int, channel: int, seq: int, data: np.ndarray) -> None:
        """Send ``data`` (contiguous, host memory, or device memory under CUDA-aware MPI);
        its completion is the FREE event of transfer ``seq``."""
        request = self.comm.Isend(data, dest=dst, tag=DATA_TAG + channel)
        self._track(request, (FREE, dst, channel, seq, None), data)

    def irecv(self, src: int, channel: int, seq: int, into: np.ndarray) -> None:
        """Receive transfer ``seq`` from rank ``src`` into ``into``; its completion is the
        transfer's READY event. Post a (peer, channel)'s receives in sequence order."""
        request = self.comm.Irecv(into, source=src, tag=DATA_TAG + channel)
        self._track(request, (READY, src, channel, seq, None), into)

    def _track(self, request, event: Event, buffer) -> None:
        self._requests.append(request)
        self._meaning.append(event)
        self._buffers.append(buffer)

    # ---- events ------------------------------------------------------------------------------
    def poll(self) -> List[Event]:
        if self.mailbox is None:
            return self._collect(self.MPI.Request.Testsome(self._requests, statuses=None))
        mailbox = self.mailbox
        events = [(kind, src, channel, seq, (a, b)) for kind, src, channel, seq, a, b in mailbox.poll()]
        # Data transfers with other hosts in flight, or control messages spilled over MPI due.
        if len(self._requests) > 1 or mailbox.spilled_to_me > self._control_received:
            events += self._collect(self.MPI.Request.Testsome(self._requests, statuses=None))
        else:
            # Our own spilled messages still in MPI's hands: an MPI moves a send on only while its
            # sender calls into it (Open MPI's shared-memory queue to a peer fills up and the rest
            # waits in the sender), and a rank waiting here makes no other MPI call. Without this
            # the peer never got them and both waited for ever (three ranks, 4 KiB chunks, 40 MiB).
            # Testing the oldest moves them all on; one test per poll, however many are pending.
            sent = self._sent
            while sent and sent[0][0].Test():
                sent.popleft()
        if events:
            self._heard = True
        return events

    def wait(self) -> List[Event]:
        """The next events. Until a peer's first event of the program has come, waited for
        without spinning (:mod:`.quiet_wait`): the peer is often still computing (a bucket
        reduced during backprop), and MPI's blocking wait would spin on a core it needs. Once
        one has come the peers are inside the collective and the waits left are the pipeline's
        own, tens to hundreds of microseconds: a sleep's timer latency would add to each (200 x
        16 KiB at 4 ranks on 2 cores: 2.29 ms sleeping, 1.68 ms testing), so they are tested
        for up to :data:`ENGAGED_SPIN_S` before sleeping."""
        return quiet_wait.until(self.poll, failure=self.failure,
                                spin_s=ENGAGED_SPIN_S if self._heard else quiet_wait.SPIN_S)

    def _collect(self, indices) -> List[Event]:
        if not indices:
            return []
        self._heard = True
        if len(indices) == 1 and indices[0] == 0:
            return [self._message()]  # the common case inside a host: one control message
        events = []
        control = False
        for i in indices:
            if i == 0:
                control = True
            else:
                events.append(self._meaning[i])
        done = set(indices)
        keep = [i for i in range(1, len(self._requests)) if i not in done]
        self._requests = [self._control] + [self._requests[i] for i in keep]
        self._meaning = [None] + [self._meaning[i] for i in keep]
        self._buffers = [None] + [self._buffers[i] for i in keep]
        if control:
            events.append(self._message())
        return events

    def _message(self) -> Event:
        """The control message that completed, then the receive for the next one."""
        kind, src, channel, seq, a, b = self._inbox.tolist()
        self._control_received += 1
        self._control = self.comm.Irecv(self._inbox, source=self.MPI.ANY_SOURCE, tag=CONTROL_TAG)
        self._requests[0] = self._control
        return kind, src, channel, seq, (a, b)

    def flush(self) -> None:
        """Complete outstanding control sends (every transport calls it at the end of a program)."""
        if self._sent:
            self.MPI.Request.Waitall([r for r, _ in self._sent])
            self._sent.clear()
            self._reap_at = REAP_AT

    def close(self) -> None:
        """Cancel the pending control receive. Sends and data requests are complete when
        programs end; those a failed program left pending are kept until exit
        (:func:`.quiet_wait.keep_unfinished`: freed while pending, a failing send aborts the job).
        (The mailbox belongs to the backend, which frees it.)"""
        quiet_wait.keep_unfinished([r for r, _ in self._sent] + self._requests[1:])
        self._sent.clear()
        teardown.cancel(self._control)
