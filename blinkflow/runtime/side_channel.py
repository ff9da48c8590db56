"""A second private communicator for what must reach peers while the runtime's own is stuck.

The runtime's communicator carries negotiation and data; when a rank stops taking part (it
failed, is frozen, or is gone) its peers sit inside a collective on it that can never complete.
This channel carries small point-to-point messages beside it:

* **notices** (``TAG_NOTICE``, received from any rank): "rank r failed: why" — sent by a rank
  whose runtime failed, or that leaves because of another rank's failure (``cause`` names
  that rank, so peers blame the right one), or that found a peer frozen;
* **heartbeats** (``TAG_BEAT``): each rank tells its left neighbour it is alive every second;
  silence means the neighbour is stopped or blocked holding the GIL (see :mod:`.liveness`).

Nothing travels in a healthy steady state but the heartbeats (two tiny messages per rank per
second, from a thread off the collective's path). It needs ``MPI_THREAD_MULTIPLE`` (a watching
thread calls MPI while the background thread is inside a collective, mpi4py's default); without
it :attr:`concurrent` is False and the channel stays silent (the pid watchdog remains).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional

from ..backends import teardown

TAG_NOTICE = 7001
TAG_BEAT = 7002
#: How long a sender keeps trying to complete its notices before it goes on (a peer that is
#: itself stuck may never take them; small messages normally leave at once).
SEND_WAIT_S = 1.0
NOTICE_CHARS = 2000


class SideChannel:
    def __init__(self, comm, rank: int, size: int, concurrent: bool):
        self.comm = comm
        """A private duplicate of the job's communicator (its own message space)."""
        self.rank = rank
        self.size = size
        self.concurrent = concurrent
        """Whether another thread may use MPI while the background thread is in a call."""
        self._lock = threading.Lock()
        self._notice = None  # the posted receive of a notice from any rank
        self._beats: Dict[int, Any] = {}  # source -> posted receive of its heartbeat
        self._sends: List[Any] = []
        self.closed = False

    # ---- notices ------------------------------------------------------------------------------
    def tell_all(self, text: str, cause: Optional[int] = None) -> None:
        """Tell every other rank that this rank stops: ``text`` says why; ``cause`` is the rank
        at fault (this rank's own failure when None)."""
        self.tell(range(self.size), text, cause)

    def tell(self, ranks, text: str, cause: Optional[int] = None, relay: bool = False) -> None:
        """:meth:`tell_all`, to ``ranks`` only. ``relay``: this rank only passes on what it heard
        (it leaves because of ``cause``); a first-hand account of ``cause`` says more."""
        notice = {"rank": self.rank, "cause": self.rank if cause is None else cause, "text": text[:NOTICE_CHARS],
                  "relay": relay}
        with self._lock:
            if self.closed or not self.concurrent:  # another thread (the user's) may be in MPI now
                return
            for peer in ranks:
                if peer != self.rank:
                    self._try(lambda: self._sends.append(self.comm.isend(notice, dest=peer, tag=TAG_NOTICE)))
        self._finish_sends(SEND_WAIT_S)

    def poll_notice(self) -> Optional[dict]:
        """A notice some rank sent, or None (never blocks)."""
        with self._lock:
            if self.closed:
                return None
            if self._notice is None:
                self._notice = self._try(lambda: self.comm.irecv(source=_any_source(), tag=TAG_NOTICE))
            if self._notice is None:
                return None
            done, notice = self._try(self._notice.test, default=(False, None))
            if not done:
                return None
            self._notice = None
            return notice if isinstance(notice, dict) else None

    # ---- heartbeats ---------------------------------------------------------------------------
    def beat(self, dest: int) -> None:
        """Tell ``dest`` this rank is alive (skipped while earlier beats are still unsent: a peer
        that takes none must not make us pile up requests)."""
        with self._lock:
            if self.closed:
                return
            self._sends = [s for s in self._sends if not self._try(s.Test, default=True)]
            if len(self._sends) < 8:
                self._try(lambda: self._sends.append(self.comm.isend(None, dest=dest, tag=TAG_BEAT)))

    def heard(self, source: int) -> bool:
        """Whether a heartbeat from ``source`` arrived since the last call (never blocks)."""
        with self._lock:
            if self.closed:
                return False
            heard = False
            while True:  # several may have queued up while this thread did not run
                request = self._beats.get(source)
                if request is None:
                    request = self._beats[source] = self._try(lambda: self.comm.irecv(source=source, tag=TAG_BEAT))
                    if request is None:
                        return heard
                done, _ = self._try(request.test, default=(False, None))
                if not done:
                    return heard
                heard = True
                self._beats[source] = None

    # ---- end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel the posted receives, let go of the sends (keeping those still pending: see
        :func:`~blinkflow.backends.quiet_wait.keep_unfinished`) and free the communicator.

        A receive from a peer that died may be complete already (in error: a test raised for
        it) or refuse the cancel; one still pending is kept referenced until exit
        (:data:`~blinkflow.backends.quiet_wait.ABANDONED`: MPI may yet write into its buffer).
        The communicator is freed all the same: ``MPI_Comm_free`` leaves pending operations to
        complete, and one left allocated in an elastic job that spawned ranks is one more for
        ``MPI_Finalize`` to disconnect (see :mod:`blinkflow.elastic.reform`)."""
        from ..backends import quiet_wait

        with self._lock:
            if self.closed:
                return
            self.closed = True
            receives = [r for r in [self._notice] + list(self._beats.values()) if r is not None]
            quiet_wait.ABANDONED.extend(r for r in receives if not _settle(r))
            quiet_wait.keep_unfinished(self._sends)  # a send freed while pending may abort the job
            self._sends = []
            teardown.free(self.comm)   # kept while revoked: see teardown.free

    def _finish_sends(self, wait_s: float) -> None:
        end = time.monotonic() + wait_s
        while True:
            with self._lock:
                self._sends = [s for s in self._sends if not self._try(s.Test, default=True)]
                if not self._sends:
                    return
            if time.monotonic() > end:
                return
            time.sleep(0.005)

    @staticmethod
    def _try(call, default=None):
        """MPI errors here (a dead peer under ULFM, a broken communicator) must never take the
        caller down: the channel is best effort beside the runtime."""
        try:
            return call()
        except Exception:  # noqa: BLE001 - see above
            return default


def _any_source() -> int:
    from mpi4py import MPI

    return MPI.ANY_SOURCE


def _settle(request) -> bool:
    """Cancel a posted receive and complete it, without blocking; whether nothing of it is
    pending any more (cancelled, received, or completed in error)."""
    from mpi4py import MPI

    try:
        request.Cancel()
    except MPI.Exception:  # complete already (in error, for a failed or revoked peer)
        pass
    try:
        return bool(request.Test())
    except MPI.Exception as error:  # complete in error, save an any-source receive told of a failure
        return error.Get_error_class() != getattr(MPI, "ERR_PROC_FAILED_PENDING", None)


def open_side_channel(base) -> SideChannel:
    """Collective over ``base`` (every rank must be there: after the start census)."""
    from mpi4py import MPI

    comm = base.Dup()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    return SideChannel(comm, comm.Get_rank(), comm.Get_size(), MPI.Query_thread() == MPI.THREAD_MULTIPLE)
