"""Running a command that dies with this process, children included (the op library's ``g++``).

A compiler is a tree of processes (``g++`` starts ``cc1plus``, ``as``, ``collect2``/``ld``). A
parent killed while it waits (SIGKILL, a job torn down) would leave that tree running, re-parented
to init, for the rest of the compile. So :func:`run_tied` starts a small guard (this file, run as
a script with no import beyond the standard library) that:

* leads a process group of its own, which the command and all its children inherit;
* is sent SIGTERM by the kernel when its parent dies (``prctl(PR_SET_PDEATHSIG)``, set between
  fork and exec, so no moment is left uncovered; a parent already gone is caught by comparing
  ``getppid()`` with the pid the parent passed);
* on SIGTERM, SIGHUP or SIGINT kills its whole group, the command's tree with it.

A parent that stops waiting itself (a timeout, KeyboardInterrupt) kills the group the same way.
Linux only (``PR_SET_PDEATHSIG``); elsewhere the guard still kills the group when signalled.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import List, Optional, Sequence

PR_SET_PDEATHSIG = 1


def _prctl():
    """libc's ``prctl``, looked up in the parent (a lookup after fork could wait for a lock
    another thread held at the fork); None where there is none (not Linux)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent(prctl):
    """The child's step between fork and exec: SIGTERM when the parent dies."""
    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    return preexec


def guard_argv(command: Sequence[str]) -> List[str]:
    """The argv that runs ``command`` under the guard, for this process as its parent."""
    return [sys.executable, "-S", os.path.abspath(__file__), str(os.getpid()), "--", *command]


def run_tied(command: Sequence[str], timeout: Optional[float] = None) -> subprocess.CompletedProcess:
    """Run ``command`` to its end, its output captured as text; its whole process tree dies if
    this process dies, or if this call ends early (``subprocess.TimeoutExpired``, an exception).
    ``subprocess.CalledProcessError`` when it fails, as ``subprocess.run(check=True)``."""
    guard = subprocess.Popen(guard_argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=_die_with_parent(_prctl()))
    try:
        out, err = guard.communicate(timeout=timeout)
    except BaseException:
        _kill_group(guard.pid)
        guard.wait()
        raise
    if guard.returncode != 0:
        raise subprocess.CalledProcessError(guard.returncode, list(command), out, err)
    return subprocess.CompletedProcess(list(command), guard.returncode, out, err)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _guard(argv: List[str]) -> int:
    """The guard's body: ``argv`` is ``[parent pid, "--", command...]``."""
    parent, command = int(argv[0]), argv[2:]

    def end(signum, _frame):
        os.killpg(0, signal.SIGKILL)   # the command's tree and this guard

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, end)
    if os.getppid() != parent:   # the parent died before the parent-death signal was set
        return 1
    child = subprocess.Popen(command)
    return child.wait()


if __name__ == "__main__":
    sys.exit(_guard(sys.argv[1:]))
