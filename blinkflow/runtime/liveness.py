"""Noticing that a peer rank died, failed, or froze, so survivors raise ShutdownError naming it
instead of hanging.

Detectors, because MPI alone cannot be trusted to return:

* **ULFM** (``mpirun --with-ft ulfm``): MPI calls on our communicator return
  ``MPI_ERR_PROC_FAILED`` (we install ``ERRORS_RETURN``); :func:`failed_ranks` names the dead
  via ``Comm.Get_failed``.
* **The watchdog thread** (:class:`Watchdog`, never on the runtime's communicator), every
  half second:

  - the pids of the peers on this machine: gone (or a zombie) means dead. It works when the
    background thread is blocked forever inside an MPI call, e.g. under
    ``mpirun --enable-recovery`` without ULFM;
  - notices on the side channel (:mod:`.side_channel`): a peer whose runtime failed while its
    process lives on (it caught the error) says so at once, and a peer that leaves because of
    another rank's failure names that rank, so nobody blames a casualty;
  - heartbeats: each rank's watchdog tells its left neighbour every second that it runs. A
    rank that is stopped (SIGSTOP, a debugger) or stuck in a C call holding the GIL sends none,
    whatever its background thread was doing: its right neighbour warns after
    ``BLINKFLOW_STALL_CHECK_TIME_SECONDS`` of silence and, with
    ``BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS`` set, tells every rank to stop, naming it. Silence
    is counted only while this watchdog itself runs on time, so a whole job paused together
    (all ranks in a long GIL-holding call, a suspended VM) accuses nobody.

Each detector calls ``on_failure(ShutdownError)``; user threads waiting on handles see it
within their wait slice, and the background thread leaves a negotiation it waits in.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import RanksLostError, ShutdownError
from ..processes import pid_alive, process_state
from . import launcher_hooks
from .log import logger

CHECK_INTERVAL_S = 0.5
#: How long a relayed notice waits for the first-hand notice it may have overtaken.
RELAY_GRACE_S = 1.0
BEAT_INTERVAL_S = 1.0


def dead_peer_error(ranks: Sequence[int], hosts: Sequence[str], how: str) -> RanksLostError:
    ranks = sorted(ranks)
    where = ", ".join(f"rank {r} on {hosts[r]}" for r in ranks)
    return RanksLostError(f"peer {where} failed ({how}); the job cannot continue. Look at that rank's "
                          "output for its error, fix it and restart the job (or train under "
                          "blinkflow.elastic.run, which goes on without it).", ranks)


def culprits(dead: Sequence[int], departed: Dict[int, int]) -> List[int]:
    """Of the ``dead`` ranks, those that failed on their own: a rank that announced it left
    because of another rank's failure (``departed[rank] = cause``) is a casualty, and its cause
    is named instead."""
    own = sorted(r for r in dead if r not in departed)
    if own:
        return own
    return sorted({departed[r] for r in dead})


class Watchdog:
    def __init__(self, rank: int, machines: Sequence[str], hosts: Sequence[str], pids: Sequence[int],
                 on_failure: Callable[[ShutdownError], None], side=None, check_s: float = 0.0,
                 shutdown_s: float = 0.0):
        me = machines[rank]
        self.rank = rank
        # Only peers whose pid we can see now: ranks in other pid namespaces (containers sharing
        # a host name) would otherwise look dead from the start.
        self._peers = [(r, pids[r]) for r in range(len(pids))
                       if r != rank and machines[r] == me and pid_alive(pids[r])]
        self._local_pids = dict(self._peers)
        self._hosts = list(hosts)
        self._on_failure = on_failure
        self._side = side
        size = len(pids)
        # The ring: beat to the left neighbour, watch the right one.
        watching = side is not None and side.concurrent and size > 1 and (check_s > 0 or shutdown_s > 0)
        self._left, self._right = ((rank - 1) % size, (rank + 1) % size) if watching else (None, None)
        self._check_s, self._shutdown_s = check_s, shutdown_s
        self.departed: Dict[int, int] = {}
        """rank -> the rank whose failure it said it left because of (from notices)."""
        self._relayed: Optional[Tuple[float, ShutdownError]] = None
        """(when, error) of the first relayed notice, held back for a first-hand one."""
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if not self._peers and self._side is None:
            return
        self._thread = threading.Thread(target=self._run, name="blinkflow-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def dead(self) -> List[int]:
        return [r for r, pid in self._peers if not pid_alive(pid)]

    def _run(self) -> None:
        silence, last, last_beat, warned = 0.0, time.monotonic(), 0.0, False
        while not self._stop.wait(CHECK_INTERVAL_S):
            now = time.monotonic()
            # Time this thread itself ran on schedule: a gap (this process paused too) counts
            # as one interval at most, so only a peer silent while we ran is accused.
            ran, last = min(now - last, 2 * CHECK_INTERVAL_S), now
            error = self._notices() or self._dead_peers()
            if error is not None:
                self._on_failure(error)
                return
            if self._right is None:
                continue
            if now - last_beat >= BEAT_INTERVAL_S:
                self._side.beat(self._left)
                last_beat = now
            if self._side.heard(self._right):
                if warned:
                    logger.warning("rank %d is heard from again after %.0f s", self._right, silence)
                silence, warned = 0.0, False
                continue
            silence += ran
            if self._check_s > 0 and silence >= self._check_s and not warned:
                warned = True
                logger.warning("rank %d has not been heard from for %.0f s: %s; collectives wait for it",
                               self._right, silence, self._why_silent(self._right))
            if self._shutdown_s > 0 and silence >= self._shutdown_s:
                text = (f"rank {self._right} ({self._hosts[self._right]}) made no progress for {silence:.0f} s "
                        f"(BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS={self._shutdown_s:g}): "
                        f"{self._why_silent(self._right)}")
                self._side.tell_all(f"rank {self.rank} stops the job: {text}", cause=self._right)
                if self._right not in self._local_pids:
                    launcher_hooks.tell_cut_off()   # this host may be cut off from mpirun
                self._on_failure(ShutdownError(f"{text}; the job cannot continue", rank=self._right))
                return

    def _notices(self) -> Optional[ShutdownError]:
        """The error a notice brings. A relay (a rank that leaves because it heard of another's
        failure) may overtake the first-hand notice it relays, since notices from different
        ranks arrive in any order: it is held back :data:`RELAY_GRACE_S` for that notice, whose
        account (the failure's own message, the frozen rank's state) the user should read."""
        if self._side is None or not self._side.concurrent:
            return None
        while True:
            notice = self._side.poll_notice()
            if notice is None:
                break
            sender, cause = int(notice.get("rank", -1)), int(notice.get("cause", -1))
            text = notice.get("text", "?")
            if cause == sender:
                return ShutdownError(f"rank {sender}{self._on(sender)} reports: {text}", rank=cause)
            # it stops because of another rank: that one failed
            self.departed[sender] = cause
            error = ShutdownError(f"rank {cause}{self._on(cause)} failed (rank {sender} reports: {text}); the job "
                                  "cannot continue", rank=cause)
            if not notice.get("relay"):
                return error
            if self._relayed is None:
                self._relayed = (time.monotonic(), error)
        if self._relayed is not None and time.monotonic() - self._relayed[0] >= RELAY_GRACE_S:
            return self._relayed[1]
        return None

    def _on(self, rank: int) -> str:
        return f" on {self._hosts[rank]}" if 0 <= rank < len(self._hosts) else ""

    def _dead_peers(self) -> Optional[ShutdownError]:
        dead = self.dead()
        if not dead:
            return None
        blamed = culprits(dead, self.departed)
        return dead_peer_error(blamed, self._hosts, "its process is gone" if set(blamed) <= set(dead)
                               else f"ranks {dead} left after its failure")

    def _why_silent(self, rank: int) -> str:
        pid = self._local_pids.get(rank)
        state = process_state(pid) if pid is not None else None
        if state == "T" or state == "t":
            return f"its process (pid {pid}) is stopped (SIGSTOP or a debugger)"
        if state in ("gone", "Z", "X"):
            return f"its process (pid {pid}) is gone"
        if state is not None:
            return (f"its process (pid {pid}) runs but its blinkflow threads do not: blocked in a call that holds "
                    "the GIL?")
        host = self._hosts[rank] if 0 <= rank < len(self._hosts) else "?"
        return (f"no heartbeat from it arrived; it runs on another host ({host}), so whether its process is stopped "
                "or the network to that host is cut cannot be seen from here")


def failed_ranks(comm) -> List[int]:
    """Ranks of ``comm`` that ULFM reports failed ([] where ULFM is unavailable)."""
    try:
        from mpi4py import MPI

        group = comm.Get_failed()
        mine = comm.Get_group()
        n = group.Get_size()
        ranks = MPI.Group.Translate_ranks(group, list(range(n)), mine)
        group.Free()
        mine.Free()
        return sorted(r for r in ranks if r != MPI.UNDEFINED and r != comm.Get_rank())
    except Exception:  # noqa: BLE001 - no ULFM, or the communicator is beyond asking
        return []


def is_process_failure(error: BaseException) -> bool:
    try:
        from mpi4py import MPI

        return isinstance(error, MPI.Exception) and error.Get_error_class() in (
            MPI.ERR_PROC_FAILED, getattr(MPI, "ERR_PROC_FAILED_PENDING", -1), getattr(MPI, "ERR_REVOKED", -1))
    except ImportError:
        return False
