"""The wrapper ``blinkrun`` starts on every rank: ``python -m blinkflow.launcher.ranks.rank_exec
[--output-dir DIR] -- COMMAND ...``.

It runs COMMAND as its child (the MPI process), and
- prefixes each whole line of the child's output with the rank: ``[1]<stdout>: ...``, and with
  ``--output-dir`` also writes the raw lines to ``DIR/rank.N/stdout`` and ``.../stderr``;
- when the child fails on its own (non-zero exit, a signal, an uncaught Python exception recorded
  by ``pyhook/sitecustomize.py``) tells blinkrun which rank failed, on which host, with the end of
  its traceback (an ``events`` line), and exits with the child's status, which makes mpirun stop
  the other ranks;
- when mpirun stops it (SIGTERM/SIGINT/SIGHUP) stops the rank's whole process group, quietly;
- tells blinkrun when its child begins MPI's initialisation (an ``mpi`` event, from the
  child's sitecustomize), so blinkrun can name a rank that never does;
- tells blinkrun when its child ends in any way (an ``exited`` event, also for status 0: a rank
  that ends early without ``MPI_Finalize`` makes mpirun stop the others, and blinkrun names it);
- dies with its parent (Linux ``PR_SET_PDEATHSIG``) and makes its child do the same, so no rank
  outlives the job;
- when its rank ended because ranks on another host fell silent (an elastic job's
  PartitionError, a stall shutdown naming a rank on another host: pyhook's ``blinkrun_cut_off``),
  stops the MPI daemon that started it, which could never reach mpirun again if this host is cut
  off (and whose job is over if it is not);
- on the first rank of each host, reclaims what killed jobs left there (:mod:`..job.reclaim`), while
  its child starts;
- gives the rank an empty stdin (``/dev/null``): the one an MPI forwards to rank 0 never ends;
- pins the rank to its GPU before CUDA starts in it (:mod:`.gpu_pin`), and with ``--verbose``
  says which GPU that is.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Mapping, Optional

from . import events
from ..job.reclaim import quietly_reclaim, scratch_prefix

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
STOP_GRACE_SECONDS = 3.0
TAIL_LINES = 40
#: What Open MPI's failure detector prints on a rank it declared dead once that rank runs again
#: (after a pause longer than the detector's timeout), just before it aborts the rank.
REPORTED_DEAD = "I have been reported dead by someone else"
_REPORTED_DEAD_BYTES = REPORTED_DEAD.encode()
#: How long the wrapper waits for an aborted rank's last output to be read (a process the rank
#: started may hold its stderr open, and then the pipe never ends).
DRAIN_S = 2.0
ELASTIC_EVENT_GRACE_S = 0.5
DAEMONS = ("prted", "orted")
"""Open MPI's per-host daemons (5.x, 4.x): the process that starts the wrappers on a host."""
_EVENT_MARK = events.MARK.encode()


def env_int(environ: Mapping[str, str], names, default: int) -> int:
    for name in names:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def log_dir(output_dir: str, rank: int, size: int) -> str:
    """``DIR/rank.N`` with N zero-padded so the folders sort in rank order."""
    return os.path.join(output_dir, f"rank.{rank:0{len(str(max(size - 1, 0)))}d}")


def exit_status(returncode: int) -> int:
    """A shell-style status: the exit code, or 128 + the signal number."""
    return returncode if returncode >= 0 else 128 - returncode


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _set_parent_death_signal(sig: int) -> None:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # not Linux: mpirun's own clean-up is all there is
        pass


class _Pump(threading.Thread):
    """Copies one of the child's pipes to our stream with the rank tag, keeping lines whole.

    A line is written tagged in one write, so lines of different ranks never mix. A carriage
    return (a progress bar such as Keras's, which redraws its line after each ``\\r``) is
    passed on as a redraw of the tagged line: ``\\r`` + tag + the text after the last ``\\r``,
    at once and without a newline, so on a terminal each update replaces the previous one;
    the newline that ends the bar ends the tagged line. ``--output-dir`` logs get the raw lines.
    """

    def __init__(self, pipe, out_fd: int, tag: bytes, log_path: Optional[str], tail=None,
                 timestamp: bool = False):
        super().__init__(daemon=True)
        self.pipe, self.out_fd, self.tag, self.tail, self.timestamp = pipe, out_fd, tag, tail, timestamp
        #: Whether a line said Open MPI's detector declared the rank dead: noted as it passes,
        #: since the abort that follows dumps every thread's stack, more lines than the tail keeps.
        self.reported_dead = False
        self.log = open(log_path, "wb") if log_path else None
        self.redrawing = False   # a "\r" update is on screen, not yet ended by a newline

    def prefix(self) -> bytes:
        if not self.timestamp:
            return self.tag
        return time.strftime("%a %b %d %H:%M:%S %Y ").encode() + self.tag

    def run(self):
        pending = b""
        try:
            fd = self.pipe.fileno()
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                pending = self.feed(pending + data)
            if pending:
                self.feed(pending + b"\n")
        except (OSError, ValueError):
            pass
        finally:
            if self.log:
                self.log.close()

    def feed(self, data: bytes) -> bytes:
        """Write the whole lines of ``data`` (and a redraw of an unfinished ``\\r`` line);
        return what waits for more."""
        while b"\n" in data:
            line, data = data.split(b"\n", 1)
            if line.startswith(_EVENT_MARK):   # the rank's own event (events.LOST): blinkrun's, untagged
                _write_all(self.out_fd, line + b"\n")
                continue
            shown = _redrawn(line[:-1] if line.endswith(b"\r") else line)   # CRLF ends a line too
            start = b"\r" if self.redrawing else b""
            self.redrawing = False
            _write_all(self.out_fd, start + self.prefix() + shown + b"\n")   # one write: the line stays whole
            if self.log:
                self.log.write(line + b"\n")
                self.log.flush()
            if self.tail is not None:
                self.tail.append(shown.decode(errors="replace"))
                self.reported_dead = self.reported_dead or _REPORTED_DEAD_BYTES in line
        at = data.rfind(b"\r")
        if 0 <= at < len(data) - 1:   # text after a "\r": a redraw (a bare "\r" waits, it may be a CRLF)
            data = data[at:]
            _write_all(self.out_fd, b"\r" + self.prefix() + _redrawn(data))
            self.redrawing = True
        return data


def _redrawn(line: bytes) -> bytes:
    """What a terminal shows of ``line``: the text after its last carriage return, without the
    backspaces a progress bar writes before it."""
    return line[line.rfind(b"\r") + 1:].replace(b"\b", b"")


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _child_env(environ: Mapping[str, str], record_file: str) -> dict:
    from . import pyhook
    env = dict(environ)
    hook_dir = os.path.dirname(os.path.abspath(pyhook.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, environ.get("PYTHONPATH", "")) if p)
    env["BLINKRUN_RECORD_FILE"] = record_file
    env["BLINKRUN_WRAPPER_PID"] = str(os.getpid())
    env.setdefault("PYTHONUNBUFFERED", "1")   # lines reach the terminal as printed, not lost on a kill
    return env


def _pinned(environ: dict, rank: int, host: str, verbose: bool) -> dict:
    """``environ`` with the rank's GPU pinned; a failure to pin is said, never fatal (the rank
    then runs with the user's CUDA_VISIBLE_DEVICES)."""
    from .gpu_pin import gpu_pin, pin_line
    local_rank = env_int(environ, LOCAL_RANK_VARS, 0)
    try:
        updates, pin = gpu_pin(environ)
    except Exception as e:
        updates, pin = {}, None
        if verbose:
            _write_all(2, f"blinkrun: rank {rank}: GPUs not pinned: {type(e).__name__}: {e}\n".encode())
    if verbose and pin is not None:
        _write_all(2, pin_line(pin, rank, local_rank, host).encode())
    return dict(environ, **updates)


def run(command: List[str], output_dir: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
        verbose: bool = False, timestamp: bool = False, rank: Optional[int] = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    rank = env_int(environ, RANK_VARS, 0) if rank is None else rank
    size = env_int(environ, SIZE_VARS, 1)
    host = socket.gethostname()
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() == 1:    # mpirun already gone
        return 128 + signal.SIGTERM
    own_group = _lead_own_group()

    def emit(event):
        _write_all(2, events.encode(dict(event, rank=rank, host=host)).encode())

    logs = None
    if output_dir:
        logs = log_dir(output_dir, rank, size)
        os.makedirs(logs, exist_ok=True)
    environ = _pinned(environ, rank, host, verbose)
    scratch = tempfile.mkdtemp(prefix=scratch_prefix(rank))
    record_file = os.path.join(scratch, "exception.json")
    stopping, reported, failed = [], [], []

    def report(returncode: Optional[int], record: Optional[dict], ended: float) -> int:
        """Tell blinkrun this rank failed (once); the status it failed with."""
        record = record or {}
        status = record.get("status") or (exit_status(returncode) if returncode else 1)
        if not reported:
            reported.append(status)
            sig = signal_name(-returncode) if returncode is not None and returncode < 0 and not record else None
            emit({"event": events.FAILED, "status": status, "signal": sig, "time": record.get("time", ended),
                  "exc": record.get("exc"), "tail": record.get("tail") or list(tail), "blames": record.get("blames")})
        return reported[0]

    def on_record(_signum, _frame):
        # pyhook's sitecustomize recorded an exception and waits for this before it aborts.
        record = _read_record(record_file)
        if record is not None:
            report(None, record, time.time())
        with open(record_file + ".ack", "w"):
            pass

    def on_mpi_starting(_signum, _frame):
        # pyhook's sitecustomize: the rank begins MPI's initialisation (once is enough).
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        emit({"event": events.MPI_STARTING, "time": time.time()})

    tail = collections.deque(maxlen=TAIL_LINES)
    signal.signal(signal.SIGUSR1, on_record)
    signal.signal(signal.SIGUSR2, on_mpi_starting)
    emit({"event": events.STARTED, "pid": os.getpid()})
    try:
        keep = [int(environ["PMI_FD"])] if environ.get("PMI_FD", "").isdigit() else []   # Hydra's PMI socket
        try:
            # stdin is /dev/null: what an MPI forwards to rank 0 never ends (see supervise.py).
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=_child_env(environ, record_file), pass_fds=keep,
                                     preexec_fn=lambda: _set_parent_death_signal(signal.SIGKILL))
        except OSError as e:
            line = f"[{rank}]<stderr>: blinkrun: cannot start {command[0]!r}: {e.strerror}\n"
            _write_all(2, line.encode())
            status = 127 if isinstance(e, FileNotFoundError) else 126
            return report(None, {"status": status, "tail": [line.strip()]}, time.time())

        def stop(signum, _frame):
            if not stopping:
                stopping.append(signum)
                _terminate_group(child.pid, own_group)
                timer = threading.Timer(STOP_GRACE_SECONDS, _kill, (child.pid,))
                timer.daemon = True
                timer.start()

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop)
        if env_int(environ, LOCAL_RANK_VARS, 0) == 0:
            # Beside the rank's start, not before it: every rank waits for the slowest in MPI's
            # start-up. Reclaiming takes only what no live process uses (a new job's segments
            # are too young), so the rank's own start is safe from it.
            threading.Thread(target=quietly_reclaim, name="blinkrun-reclaim", daemon=True).start()
        pumps = [_Pump(child.stdout, 1, f"[{rank}]<stdout>: ".encode(), logs and os.path.join(logs, "stdout"),
                       timestamp=timestamp),
                 _Pump(child.stderr, 2, f"[{rank}]<stderr>: ".encode(), logs and os.path.join(logs, "stderr"), tail,
                       timestamp=timestamp)]
        for pump in pumps:
            pump.start()
        returncode = child.wait()
        ended = time.time()
        exited = {"event": events.EXITED, "status": exit_status(returncode), "time": ended}
        if returncode == -signal.SIGABRT:
            # Open MPI aborts a rank its detector declared dead when that rank runs again: the
            # rank's last words say so, and blinkrun names the loss by its cause (no heartbeat),
            # not by the abort. They were written before the rank ended: read them first.
            pumps[1].join(timeout=DRAIN_S)
            if pumps[1].reported_dead:
                exited["declared_dead"] = True
        emit(exited)
        _terminate_group(child.pid, own_group)   # leftovers of the rank's own children hold the pipes
        for pump in pumps:
            pump.join(timeout=2.0)
        record = _read_record(record_file)
        if returncode == 0 and record is None:
            return 0
        if stopping and record is None:
            return 128 + stopping[0]
        failed.append(True)
        return report(returncode, record, ended)
    finally:
        cut_off = os.path.exists(record_file + ".cut")
        shutil.rmtree(scratch, ignore_errors=True)
        if cut_off:
            time.sleep(ELASTIC_EVENT_GRACE_S)   # the events just written may still reach mpirun
            stop_cut_off_daemon()
        if failed and _elastic(environ):
            # ULFM tells the peers of a rank that died by a signal; of one that exited without
            # MPI_Finalize (this wrapper, whatever its child did), never: they would wait forever.
            # First a moment for mpirun to forward the events just written (a killed process's
            # unsent output is dropped).
            time.sleep(ELASTIC_EVENT_GRACE_S)
            os.kill(os.getpid(), signal.SIGKILL)


def stop_cut_off_daemon(parent: Optional[int] = None) -> bool:
    """The rank ended because ranks on another host fell silent (pyhook's ``blinkrun_cut_off``
    said so): stop the MPI daemon that started it on this host (this wrapper's parent, Open MPI's
    ``prted``; never mpirun itself), which would otherwise wait for an mpirun it may not reach
    until the network returns; the job is over here either way. Whether it was told."""
    parent = os.getppid() if parent is None else parent
    try:
        with open(f"/proc/{parent}/comm") as f:
            name = f.read().strip()
    except OSError:
        return False
    if name not in DAEMONS:
        return False
    try:
        os.kill(parent, signal.SIGTERM)
    except OSError:
        return False
    return True


def _elastic(environ: Mapping[str, str]) -> bool:
    """Whether the rank belongs to an elastic job (``blinkrun --min-np``/``--host-discovery-script``)."""
    from blinkflow.config import Config

    try:
        return Config.from_env(environ).elastic_min_np > 0
    except Exception:  # noqa: BLE001 - a bad setting fails in the rank itself, with its message
        return False


def _lead_own_group() -> bool:
    """Make this wrapper the leader of its own process group, which its child and the child's
    children share: MPICH's Hydra stops a job by SIGKILLing each rank's process group, which then
    reaches every process of the rank (Open MPI signals the wrapper, which passes it on)."""
    if os.getpgrp() != os.getpid():
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
    return os.getpgrp() == os.getpid()


def _terminate_group(child_pid: int, own_group: bool) -> None:
    """SIGTERM to the rank's processes: the whole group when this wrapper leads one (ignoring the
    signal itself), else the child alone."""
    try:
        if own_group:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.killpg(os.getpgrp(), signal.SIGTERM)
        else:
            os.kill(child_pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_record(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            record = json.load(f)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m blinkflow.launcher.ranks.rank_exec",
                                     description="Run one rank of a blinkrun job (started by blinkrun).")
    parser.add_argument("--output-dir", help="also write this rank's stdout/stderr under DIR/rank.N/")
    parser.add_argument("--verbose", action="store_true", help="say which GPU the rank drives")
    parser.add_argument("--timestamp", action="store_true", help="start every output line with the time")
    parser.add_argument("--rank", type=int, help="the rank's tag (a rank an elastic job added: its slot)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("missing COMMAND after --")
    sys.exit(run(command, args.output_dir, verbose=args.verbose, timestamp=args.timestamp, rank=args.rank))


if __name__ == "__main__":
    main()
