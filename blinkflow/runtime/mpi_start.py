"""MPI's own start-up, under a deadline that does not need this process's interpreter.

``MPI_Init`` (importing ``mpi4py.MPI``) waits for every rank of the job. A rank that never gets
there (it exited, even with status 0, or is stuck before ``blinkflow.init()``) leaves the others
inside it forever, and nothing in them can act: ``MPI_Init`` holds the GIL, so no Python thread
runs, and ``BLINKFLOW_START_TIMEOUT``'s own check starts only once MPI is up. So before it
starts, :func:`watched_mpi_init` starts a watchdog *process* (a few lines of Python, no site,
no blinkflow) that waits on a pipe: told in time that MPI is up, it leaves; else it says on
stderr which rank gave up, which ranks never began, and kills that rank, whose end makes mpirun
stop the job.

Which ranks never began: before ``MPI_Init`` each rank leaves a file named by its rank in a
folder of the job's, inside the session folder Open MPI's launcher made on the rank's host
(``PMIX_SERVER_TMPDIR``, removed with the job) and named by the job's PMIx namespace. The
watchdog lists it: on one host, the ranks of ``OMPI_COMM_WORLD_SIZE`` without a file are the
missing ones; across hosts each host sees its own ranks only, so it names what it can (this
host's ranks all began: the missing one is elsewhere). Where the launcher sets none of these,
the message says what to look for.

Under ``blinkrun`` no watchdog is started: blinkrun sees every rank's process, and names the
rank that never began MPI's start-up itself (``launcher/job/supervise.py``).
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from typing import Iterator, Mapping, Optional

#: The watchdog: argv = timeout seconds, the pid it guards, the rank's name, the job's presence
#: folder ("" when unknown), the job's size and this host's ranks (0 when unknown). Its stdin is
#: a pipe from the guarded process: a byte or end-of-file (the process finished or died) in time
#: means there is nothing to do.
_WATCHDOG = r"""
import os, select, signal, sys
timeout, pid, rank = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
folder, size, local = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
if select.select([sys.stdin], [], [], timeout)[0]:
    sys.exit(0)
try:
    began = sorted(int(name) for name in os.listdir(folder) if name.isdigit()) if folder else None
except OSError:
    began = None
def ranks(rs):
    return ("rank %d" % rs[0]) if len(rs) == 1 else ("ranks %s" % rs)
if began is not None and size and local == size:
    missing = [r for r in range(size) if r not in began]
    one = len(missing) == 1
    who = ("%s never began it: %s before blinkflow.init() (look for %s that ended early, even with status 0) "
           "or %s stuck before it" % (ranks(missing), "it exited" if one else "they exited", "it" if one else "them",
                                      "is" if one else "are")
           if missing else "every rank began it, so it waits on something else (the network between hosts?)")
elif began is not None and local and len(began) >= local:
    who = ("the %d ranks on this host (%s) all began it: the rank that never did is on another host; it exited "
           "before blinkflow.init() (even with status 0) or is stuck before it" % (local, ranks(began)))
elif began is not None and local:
    who = ("%d of this host's %d ranks never began it (those that did: %s): they exited before blinkflow.init() "
           "(even with status 0) or are stuck before it" % (local - len(began), local, ranks(began) if began
           else "none"))
else:
    who = ("MPI waits for every rank, so some rank never began it: it exited before blinkflow.init() (look for "
           "a rank that ended early, even with status 0) or is stuck before it")
sys.stderr.write("blinkflow: rank %s: MPI's start-up (MPI_Init, in blinkflow.init()) did not complete within %g s "
                 "(BLINKFLOW_START_TIMEOUT): %s. Stopping this rank so that the job ends.\n" % (rank, timeout, who))
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
    folder = presence_folder(environ)
    if folder is not None and rank.isdigit():
        try:
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, rank), "w").close()
        except OSError:  # no name for the missing rank, the deadline all the same
            folder = None
    size, local = (environ.get(v, "") for v in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"))
    try:
        watchdog = subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, f"{timeout_s:g}", str(os.getpid()), rank,
                                     folder or "", size if size.isdigit() else "0", local if local.isdigit() else "0"],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    except OSError:  # no process to spare: start without the deadline rather than not at all
        yield
        return
    try:
        yield
    finally:
        watchdog.stdin.close()  # end-of-file: in time
        watchdog.wait()


def presence_folder(environ: Mapping[str, str]) -> Optional[str]:
    """The folder where this job's ranks on this host mark that they began MPI's start-up: in the
    launcher's session folder, named by the job's PMIx namespace (None when either is unknown)."""
    session, namespace = environ.get("PMIX_SERVER_TMPDIR"), environ.get("PMIX_NAMESPACE")
    if not session or not namespace or not os.path.isdir(session):
        return None
    return os.path.join(session, "blinkflow-started-" + re.sub(r"[^A-Za-z0-9_.@-]", "_", namespace))
