"""Noticing that a peer rank died, so survivors raise ShutdownError instead of hanging.

Two detectors, because MPI alone cannot be trusted to return:

* **ULFM** (``mpirun --with-ft ulfm``): MPI calls on our communicator return
  ``MPI_ERR_PROC_FAILED`` (we install ``ERRORS_RETURN``); :func:`failed_ranks` names the dead
  via ``Comm.Get_failed``.
* **The watchdog** (no MPI at all): a thread that checks every second whether the pids of the
  peers on this machine still exist (a zombie counts as dead). It works when the background
  thread is blocked forever inside an MPI call, e.g. under ``mpirun --enable-recovery`` without
  ULFM. Peers on other machines are covered by ULFM or by mpirun's default of killing the job.

Either detector calls ``on_failure(ShutdownError)``; user threads waiting on handles see it
within their wait slice.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, List, Optional, Sequence

from ..errors import ShutdownError

CHECK_INTERVAL_S = 1.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            # state is the field after the parenthesised command name
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill(0) already said it exists


def dead_peer_error(ranks: Sequence[int], hosts: Sequence[str], how: str) -> ShutdownError:
    ranks = sorted(ranks)
    where = ", ".join(f"rank {r} on {hosts[r]}" for r in ranks)
    return ShutdownError(f"peer {where} failed ({how}); the job cannot continue. Look at that rank's "
                         "output for its error, fix it and restart the job.", rank=ranks[0])


class Watchdog:
    def __init__(self, rank: int, machines: Sequence[str], pids: Sequence[int],
                 on_failure: Callable[[ShutdownError], None]):
        me = machines[rank]
        # Only peers whose pid we can see now: ranks in other pid namespaces (containers sharing
        # a host name) would otherwise look dead from the start.
        self._peers = [(r, pids[r]) for r in range(len(pids))
                       if r != rank and machines[r] == me and pid_alive(pids[r])]
        self._machines = list(machines)
        self._on_failure = on_failure
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if not self._peers:
            return
        self._thread = threading.Thread(target=self._run, name="blinkflow-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def dead(self) -> List[int]:
        return [r for r, pid in self._peers if not pid_alive(pid)]

    def _run(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            dead = self.dead()
            if dead:
                self._on_failure(dead_peer_error(dead, self._machines, "its process is gone"))
                return


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
