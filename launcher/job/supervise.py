"""Run mpirun, relay its output, and turn what the ranks report into blinkrun's exit status.

- stdout passes through; stderr passes through minus the wrappers' ``events`` lines;
- the first rank to fail (earliest failure time) is named, with its host and the end of its
  traceback, and its status becomes blinkrun's; if mpirun has not stopped the job a few seconds
  after a failure, blinkrun stops it;
- SIGINT/SIGTERM/SIGHUP stop the job: SIGTERM to mpirun (its own session, so a terminal's
  Ctrl-C reaches blinkrun alone), SIGKILL to mpirun's process group after a grace period; ranks
  whose mpirun dies follow it (their wrappers hold ``PR_SET_PDEATHSIG``);
- blinkrun itself killed (SIGKILL, which it cannot catch): mpirun gets SIGTERM from the kernel
  (``PR_SET_PDEATHSIG``, set before it starts) and stops the job as for Ctrl-C;
- the rank named is the first that failed on its own (:mod:`.verdict`): ranks that stopped
  because of a peer (they say so) are not blamed;
- ``start_timeout``: every rank's wrapper must report within this many seconds; and once one
  rank begins MPI's initialisation (its ``mpi`` event), every other rank must begin it within
  this many seconds too: MPI's start-up waits for every rank, so a rank that exited before it
  (even with status 0) or is stuck before it would leave the others waiting inside it forever.
  blinkrun then stops the job and names those ranks. (A rank that exits after another began
  makes Open MPI's mpirun stop the job first: blinkrun names that rank the same way);
- an elastic job whose ranks have all ended or been lost (the driver's ``finished``) but whose
  mpirun still runs a few seconds later is stopped: mpirun waits forever for a host that went
  silent, and the job ended well (status 0);
- mpirun that says it lost a host's daemon (:mod:`.daemon_loss`) is reported with that host and
  the ranks that ran there, which could report nothing themselves;
- when mpirun has exited, what is left of its session (this host's rank wrappers, stopping their
  ranks) ends before blinkrun returns, so nothing of the job outlives it here.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO, Dict, List, Mapping, Optional, Sequence

from ..ranks import events
from . import verdict
from .daemon_loss import DaemonLoss

STOP_GRACE_SECONDS = 3.0      # SIGTERM -> SIGKILL for mpirun
FAILURE_GRACE_SECONDS = 5.0   # a rank failed -> mpirun must have stopped the job by then


class Job:
    def __init__(self, argv: Sequence[str], env: Mapping[str, str], np: int, start_timeout: float,
                 out: Optional[BinaryIO] = None, err: Optional[BinaryIO] = None, elastic=None):
        self.argv, self.env, self.np, self.start_timeout = list(argv), dict(env), np, start_timeout
        self.elastic = elastic
        """An elastic job's driver (launcher/elastic/driver.py): it hears every rank's events, and
        a failed rank does not stop the job (the others re-form without it)."""
        self.out = out or sys.stdout.buffer
        self.err = err or sys.stderr.buffer
        self.started: Dict[int, str] = {}
        self.failures: List[dict] = []
        self.exits: Dict[int, dict] = {}
        self.interrupted: Optional[int] = None
        self.interrupted_at = 0.0
        self.start_timed_out = False
        self.mpi_starting: Dict[int, float] = {}
        """Ranks that began MPI's initialisation, and when."""
        self.mpi_start_timed_out = False
        self.daemon_loss = DaemonLoss()
        """The hosts whose MPI daemon mpirun said it lost (its output names them, nothing else does)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._finishing = threading.Event()
        self.proc: Optional[subprocess.Popen] = None

    # -- running ---------------------------------------------------------------------------
    def run(self) -> int:
        try:
            # No rank reads blinkrun's stdin: Open MPI forwards it to rank 0 and never closes it,
            # so a rank reading stdin (even `< /dev/null`) would wait forever; every rank gets
            # /dev/null instead (its wrapper sees to the ranks).
            self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        except OSError as e:
            self._say(f"cannot start {self.argv[0]}: {e.strerror}")
            return 127
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        pumps = [threading.Thread(target=self._relay_stdout, daemon=True),
                 threading.Thread(target=self._relay_stderr, daemon=True)]
        for pump in pumps:
            pump.start()
        watchdog = threading.Timer(self.start_timeout, self._check_started)
        watchdog.daemon = True
        watchdog.start()
        try:
            returncode = self.proc.wait()
            self._end_session()   # before the pumps: a process left may hold mpirun's pipes
            for pump in pumps:
                pump.join(timeout=5.0)
        finally:
            watchdog.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self._report(returncode)

    def stop(self) -> None:
        """SIGTERM to mpirun now, SIGKILL to its process group after a grace period."""
        if self._stopping.is_set() or self.proc is None:
            return
        self._stopping.set()
        _signal(self.proc.pid, signal.SIGTERM, group=False)
        timer = threading.Timer(STOP_GRACE_SECONDS, _signal, (self.proc.pid, signal.SIGKILL, True))
        timer.daemon = True
        timer.start()

    def _stop_if_running(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
            # mpirun's ssh to the silent host (its own process group, in mpirun's session)
            # would wait on a dead connection for good: end what is left of mpirun's session.
            try:
                self.proc.wait(timeout=STOP_GRACE_SECONDS + 2.0)
            except subprocess.TimeoutExpired:
                pass
            _kill_session(self.proc.pid)

    def _end_session(self) -> None:
        """mpirun has exited: what is left of its session (the wrappers of this host's ranks, which
        its exit sends SIGTERM and which stop their ranks within their grace period, or an ssh to
        a host) ends before blinkrun returns; past the grace period it is killed."""
        deadline = time.monotonic() + STOP_GRACE_SECONDS + 2.0
        while _session_members(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _kill_session(self.proc.pid)

    def _on_signal(self, signum, _frame):
        if self.interrupted is None:
            self.interrupted, self.interrupted_at = signum, time.time()
        self.stop()

    def _check_started(self):
        with self._lock:
            missing = sorted(set(range(self.np)) - set(self.started))
        if missing and self.proc.poll() is None:
            self.start_timed_out = True
            self._say(f"only {self.np - len(missing)} of {self.np} ranks started within {self.start_timeout:g} s "
                      f"(missing: {_ranks(missing)}); check the host names, ssh access and that this Python "
                      "exists on every host, or raise --start-timeout")
            self.stop()

    def _check_mpi_started(self):
        with self._lock:
            missing = sorted(set(range(self.np)) - set(self.mpi_starting))
            first = min(self.mpi_starting, key=self.mpi_starting.get)
            exits = dict(self.exits)
        if not missing or self.proc.poll() is not None or self._stopping.is_set():
            return
        self.mpi_start_timed_out = True
        self._say(self._never_began_mpi(missing, exits, f"did not begin it within {self.start_timeout:g} s of rank {first}; "
                                        "stopping the job"))
        self.stop()

    def _never_began_mpi(self, missing: List[int], exits: Dict[int, dict], what_then: str) -> str:
        """The ranks ``missing`` from MPI's start-up, each with how it stands, and ``what_then``."""
        said = []
        for rank in missing[:16]:
            ended = exits.get(rank)
            how = (f"exited with status {ended.get('status')} without starting MPI" if ended is not None else
                   "is still running but has not started MPI (stuck, or slow before blinkflow.init())")
            said.append(f"rank {rank} (host {self.started.get(rank, '?')}) {how}")
        more = " ..." if len(missing) > 16 else ""
        return (f"{'; '.join(said)}{more}: MPI's start-up waits for every rank, and {len(missing)} of {self.np} "
                f"{what_then}. Every rank must call blinkflow.init() (or import mpi4py.MPI); raise --start-timeout "
                "for a slow start")

    def _ended_before_mpi(self) -> List[int]:
        """Ranks that ended with status 0 without beginning MPI's start-up while another rank began
        it, earliest first. Open MPI's mpirun stops the job for such a rank as soon as it ends if
        another has begun by then (which comes first depends on how fast each rank starts), so
        blinkrun's own start-up check may never fire: these ranks are the cause all the same."""
        if not self.mpi_starting:
            return []
        ended = [e for r, e in self.exits.items() if r not in self.mpi_starting and e.get("status") == 0]
        return [e["rank"] for e in sorted(ended, key=lambda e: e.get("time") or 0.0)]

    # -- output ----------------------------------------------------------------------------
    def _relay_stdout(self):
        # As it comes, not line by line: a rank's progress bar redraws its line without a newline
        # (rank_exec.py). The bytes pass on in mpirun's order, which keeps each tagged line whole.
        fd = self.proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self._write(self.out, chunk)
            self.daemon_loss.feed_bytes(chunk)

    def _relay_stderr(self):
        for raw in iter(self.proc.stderr.readline, b""):
            raw = raw.replace(b"\0", b"")   # Open MPI ends its help messages with a NUL
            text, event = events.split(raw.decode(errors="replace"))
            self.daemon_loss.feed(text)
            if text:
                self._write(self.err, text.encode() if event else raw)
            if event:
                self._on_event(event)

    def _on_event(self, event: dict):
        kind, rank = event.get("event"), event.get("rank")
        if self.elastic is not None:
            if self.elastic.on_event(event):
                self.stop()
            elif self.elastic.finished() and not self._finishing.is_set():
                # Every rank not lost has ended: mpirun ends too, unless a host it had went
                # silent (Open MPI 5 waits for that host's daemon forever): then stop it.
                self._finishing.set()
                timer = threading.Timer(FAILURE_GRACE_SECONDS, self._stop_if_running)
                timer.daemon = True
                timer.start()
        with self._lock:
            if kind == events.STARTED:
                self.started[rank] = event.get("host", "?")
            elif kind == events.MPI_STARTING:
                if not self.mpi_starting:
                    timer = threading.Timer(self.start_timeout, self._check_mpi_started)
                    timer.daemon = True
                    timer.start()
                self.mpi_starting[rank] = time.time()
            elif kind == events.EXITED:
                self.exits[rank] = dict(event, host=self.started.get(rank, "?"))
            elif kind == events.FAILED:
                self.failures.append(event)
                if len(self.failures) == 1 and self.elastic is None:
                    timer = threading.Timer(FAILURE_GRACE_SECONDS, self.stop)
                    timer.daemon = True
                    timer.start()

    def _write(self, stream: BinaryIO, data: bytes):
        try:
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):
            pass

    def _say(self, message: str):
        self._write(self.err, f"blinkrun: {message}\n".encode())

    # -- the verdict -----------------------------------------------------------------------
    def _report(self, returncode: int) -> int:
        # Ranks that fail while being stopped are casualties of the stop, not its cause.
        failures = [f for f in self.failures if self.interrupted is None or (f.get("time") or 0.0) < self.interrupted_at]
        if self.elastic is not None and self.elastic.finished():
            return 0   # the ranks that ended the job ended well; the ranks lost on the way were said
        if failures:
            first = verdict.first_cause(failures)
            if first is None:  # every failure is a casualty: name the rank they blame
                blamed = verdict.blamed_rank(failures)
                self._say(verdict.describe_blamed(blamed, failures, self.exits, self.started))
                status = (self.exits.get(blamed) or {}).get("status") or min(
                    (f for f in failures if verdict.is_casualty(f)), key=lambda f: f.get("time") or 0.0).get("status")
                return int(status or 1)
            self._say(describe_failure(first, len(failures)))
            return int(first.get("status") or 1)
        if self.interrupted is not None:
            self._say(f"stopped by {signal.Signals(self.interrupted).name}; every rank was stopped")
            return 128 + self.interrupted
        if self.start_timed_out or self.mpi_start_timed_out:
            return 1
        unended = sorted(r for r in self.started if (self.exits.get(r) or {}).get("status") != 0)
        if self.daemon_loss.hosts:
            status = returncode if returncode > 0 else 128 - returncode if returncode < 0 else 1
            self._say(self._describe_daemon_loss(returncode))
            return status
        if returncode == 0 and unended:
            # Open MPI 5's mpirun exits 0 after ending a job whose host's daemon it lost; the
            # ranks it stopped then say nothing (stopped quietly) or end with a signal.
            hosts = sorted({self.started[r] for r in unended})
            self._say(f"mpirun exited with status 0, but rank(s) {_ranks(unended)} (host {', '.join(hosts)}) did "
                      "not end on their own: mpirun stopped the job (it does when it loses a host's Open MPI "
                      "daemon); the job did not complete")
            return 1
        if returncode != 0:
            status = returncode if returncode > 0 else 128 - returncode
            early = self._ended_before_mpi()
            if early:
                self._say(self._never_began_mpi(early, self.exits, "ended without beginning it, so mpirun stopped "
                                                f"the job (status {status})"))
                return 1
            ended = verdict.first_exit(self.exits)
            if ended is not None:
                self._say(f"mpirun exited with status {status}; no rank reported a failure, but rank {ended['rank']} "
                          f"(host {ended.get('host', '?')}) ended first, with status {ended.get('status')}: a rank "
                          "that ends without MPI_Finalize (os._exit, a crash outside Python) makes mpirun stop "
                          "the others")
            else:
                self._say(f"mpirun exited with status {status} and no rank reported a failure")
            return status
        return 0


    def _describe_daemon_loss(self, returncode: int) -> str:
        """What was seen when mpirun lost a host's daemon: which host, which ranks ran there."""
        said = []
        for host in self.daemon_loss.hosts:
            ranks = sorted(r for r, h in self.started.items() if h == host)
            there = f"rank{'s' if len(ranks) > 1 else ''} {_ranks(ranks)}" if ranks else "no rank that had reported"
            said.append(f"host {host} (running {there})")
        return (f"mpirun exited with status {returncode} after it lost its Open MPI daemon on "
                f"{'; '.join(said)}: the ranks there could report nothing more, and mpirun ended the job "
                "(its message above); no rank reported a failure of its own")


def describe_failure(failure: dict, count: int = 1) -> str:
    """The lines blinkrun prints about the first rank that failed."""
    rank, host, status = failure.get("rank"), failure.get("host", "?"), failure.get("status")
    how = f"killed by {failure['signal']}" if failure.get("signal") else f"exited with status {status}"
    lines = [f"rank {rank} (host {host}) failed first: {how}"]
    if failure.get("exc"):
        lines[0] += f": {failure['exc']}"
    tail = failure.get("tail") or []
    if tail:
        lines.append(f"end of rank {rank}'s {'traceback' if failure.get('exc') else 'stderr'}:")
        lines += ["    " + line for line in tail[-15:]]
    if count > 1:
        lines.append(f"({count - 1} more rank(s) failed after it)")
    lines.append(f"exit status {status}")
    return "\nblinkrun: ".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (" ..." if len(ranks) > 16 else "")


def _die_with_parent() -> None:
    """In mpirun, before it runs: SIGTERM when blinkrun dies, even by SIGKILL (Linux; elsewhere
    a killed blinkrun leaves the job to mpirun)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # noqa: BLE001 - not Linux
        pass


def _session_members(sid: int, living: bool = False) -> List[int]:
    """The processes of session ``sid`` (Linux /proc; elsewhere none are found); with ``living``,
    not those that have already exited and wait to be reaped (zombies)."""
    members = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()   # after "(comm)": state ppid pgrp session
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(sid) and not (living and fields[0] in "ZX"):
            members.append(int(entry))
    return members


def _kill_session(sid: int, wait_s: float = 5.0) -> None:
    """SIGKILL every living member of session ``sid`` and wait until none runs: the signal is
    delivered asynchronously, and a process on another CPU keeps running until it next enters
    the kernel, so returning right after ``kill`` could leave it alive for the caller to see."""
    for pid in _session_members(sid, living=True):
        _signal(pid, signal.SIGKILL, group=False)
    deadline = time.monotonic() + wait_s
    while _session_members(sid, living=True) and time.monotonic() < deadline:
        time.sleep(0.01)


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
