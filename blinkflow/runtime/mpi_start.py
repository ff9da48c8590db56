"""MPI's own start-up, under a deadline that does not need this process's interpreter.

``MPI_Init`` (importing ``mpi4py.MPI``) waits for every rank of the job. A rank that never gets
there (it exited, even with status 0, or is stuck before ``blinkflow.init()``) leaves the others
inside it forever, and nothing in them can act: ``MPI_Init`` holds the GIL, so no Python thread
runs, and ``BLINKFLOW_START_TIMEOUT``'s own check starts only once MPI is up. So before it
starts, :func:`watched_mpi_init` starts a watchdog *process* (a few lines of Python, no site,
no blinkflow) that waits on a pipe: told in time that MPI is up, it leaves; else it says on
stderr which rank gave up and why, and kills that rank, whose end makes mpirun stop the job.

Under ``blinkrun`` no watchdog is started: blinkrun sees every rank's process, and names the
rank that never began MPI's start-up itself (``launcher/supervise.py``). Plain mpirun cannot
tell a rank which peer is missing, so the message says what to look for.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator, Mapping, Optional

#: The watchdog: argv = timeout seconds, the pid it guards, the rank's name. Its stdin is a pipe
#: from the guarded process: a byte or end-of-file (the process finished or died) in time means
#: there is nothing to do.
_WATCHDOG = r"""
import os, select, signal, sys
timeout, pid, rank = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if select.select([sys.stdin], [], [], timeout)[0]:
    sys.exit(0)
sys.stderr.write(
    "blinkflow: rank %s: MPI's start-up (MPI_Init, in blinkflow.init()) did not complete within %g s "
    "(BLINKFLOW_START_TIMEOUT): MPI waits for every rank, so some rank never began it: it exited before "
    "blinkflow.init() (look for a rank that ended early, even with status 0) or is stuck before it. "
    "Stopping this rank so that the job ends.\n" % (rank, timeout))
sys.stderr.flush()
try:
    os.kill(pid, signal.SIGKILL)
except OSError:
    pass
"""
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
_UNDER_BLINKRUN = "BLINKRUN_WRAPPER_PID"


def watched_mpi_init(timeout_s: float, environ: Optional[Mapping[str, str]] = None) -> None:
    """Initialise MPI (import ``mpi4py.MPI``) with the watchdog of this module's docstring."""
    with mpi_start_watch(timeout_s, environ):
        from mpi4py import MPI  # noqa: F401  (MPI_Init: every rank of the job must get here)


@contextlib.contextmanager
def mpi_start_watch(timeout_s: float, environ: Optional[Mapping[str, str]] = None) -> Iterator[None]:
    """Kill this process if the block has not finished within ``timeout_s`` seconds (not under
    blinkrun, which watches every rank from outside)."""
    environ = os.environ if environ is None else environ
    if environ.get(_UNDER_BLINKRUN):
        yield
        return
    rank = next((environ[v] for v in _RANK_VARIABLES if environ.get(v, "").isdigit()), "?")
    try:
        watchdog = subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, f"{timeout_s:g}", str(os.getpid()), rank],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    except OSError:  # no process to spare: start without the deadline rather than not at all
        yield
        return
    try:
        yield
    finally:
        watchdog.stdin.close()  # end-of-file: in time
        watchdog.wait()
