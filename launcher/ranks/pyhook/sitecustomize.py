"""Loaded by Python at start-up in a rank launched by ``blinkrun`` (its folder is on PYTHONPATH).

It installs a ``sys.excepthook`` that, after printing the traceback as usual, records the
exception for the wrapper (like torch's ``@record``) when it is the rank's: raised in the
wrapper's direct child, or in any process below it that initialised MPI (``sh -c "python ..."``
ranks); a helper Python started by the rank that fails is the rank's business. When MPI is
initialised it then calls ``MPI.COMM_WORLD.Abort`` so peers waiting inside
a collective are stopped instead of hanging, as ``python -m mpi4py`` does. Without the abort an
exiting rank would run mpi4py's atexit ``MPI_Finalize``, which can wait forever for those peers;
``sys.exit`` with a non-zero status after MPI_Init likewise aborts at exit.

It also tells the wrapper (SIGUSR2) when the rank starts MPI's initialisation (the import of
``mpi4py.MPI`` begins), so blinkrun can name a rank that never gets there: MPI's start-up waits
for every rank, so the others would wait inside it forever.

It imports nothing of blinkflow (it runs in every Python the rank starts) and then loads the
``sitecustomize`` this one shadows, if any.
"""
import os
import sys

_RECORD_VAR = "BLINKRUN_RECORD_FILE"
_WRAPPER_VAR = "BLINKRUN_WRAPPER_PID"
_TAIL_LINES = 40


def _write_record(exc, tail, status, blames=None):
    try:
        import json
        import time
        record = {"exc": exc, "tail": tail, "status": status, "time": time.time(), "pid": os.getpid(),
                  "blames": blames}
        path = os.environ[_RECORD_VAR]
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
    except Exception:  # recording must never hide the user's error
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    _tell_wrapper()


def _tell_wrapper(wait_seconds=3.0):
    """Have the wrapper report the failure to blinkrun now, before an abort kills it (some MPIs,
    Hydra among them, SIGKILL every process of the job at once); it answers with an ack file."""
    import signal
    import time
    ack = os.environ[_RECORD_VAR] + ".ack"
    try:
        os.kill(int(os.environ[_WRAPPER_VAR]), signal.SIGUSR1)
    except (OSError, ValueError, KeyError):
        return
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline and not os.path.exists(ack):
        time.sleep(0.01)


def _mpi_running():
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() else None


def _blamed_rank(value):
    """The peer a blinkflow error says this rank stops because of (ShutdownError.rank), if any:
    blinkrun then names that rank as the cause, not this casualty."""
    rank = getattr(value, "rank", None)
    if type(value).__module__.startswith("blinkflow") and isinstance(rank, int) and not isinstance(rank, bool):
        return rank
    return None


def _record_and_abort(etype, value, tb, _previous=sys.excepthook):
    _previous(etype, value, tb)
    mpi = _mpi_running()
    if mpi is None and os.environ.get(_WRAPPER_VAR) != str(os.getppid()):
        return
    import traceback
    lines = "".join(traceback.format_exception(etype, value, tb)).splitlines()
    _write_record("".join(traceback.format_exception_only(etype, value)).strip(), lines[-_TAIL_LINES:], 1,
                  _blamed_rank(value))
    if mpi is not None:
        mpi.COMM_WORLD.Abort(1)


def blinkrun_record_failure(exc, blames=None):
    """Called by blinkflow's runtime before it leaves with status 1 after a peer's failure (it
    skips MPI_Finalize, which would wait for that peer, and Python's own exit): record why and
    whom it blames, as an uncaught exception would."""
    if os.environ.get(_RECORD_VAR) and os.environ.get(_WRAPPER_VAR):
        _write_record(exc, [], 1, blames)


def blinkrun_ranks_lost(ranks):
    """Called by blinkflow's elastic reset on the new rank 0: tell blinkrun that the job went on
    without ``ranks`` (MPI_COMM_WORLD ranks, blinkrun's numbers). A host that went silent takes
    its ranks' wrappers with it, so no one else can say they are gone; blinkrun then knows the
    job has ended once the others have, and stops mpirun, which would wait for that host."""
    if os.environ.get(_WRAPPER_VAR):
        import json
        line = "@@blinkrun@@ " + json.dumps({"event": "lost", "ranks": sorted(int(r) for r in ranks)}) + "\n"
        try:
            os.write(2, line.encode())
        except OSError:   # stderr closed: blinkrun is gone, and no one is left to tell
            pass


def blinkrun_cut_off():
    """Called by blinkflow when the rank stops because ranks on another host fell silent (an
    elastic side without the quorum, a stall shutdown naming a rank on another host): when the
    rank ends, its wrapper also stops the MPI daemon that started it on this host, which would
    otherwise wait for an mpirun it may not reach."""
    path = os.environ.get(_RECORD_VAR)
    if path and os.environ.get(_WRAPPER_VAR):
        try:
            with open(path + ".cut", "w"):
                pass
        except OSError:
            pass


def _exit_and_abort(status=None, _exit=sys.exit):
    """``sys.exit(non-zero)`` after MPI_Init: abort instead of MPI_Finalize, which would wait for
    peers that may be inside a collective (mpi4py's own ``python -m mpi4py`` does the same)."""
    import threading
    if status not in (None, 0) and threading.current_thread() is threading.main_thread() and _mpi_running():
        code = status if isinstance(status, int) else 1
        _write_record(f"sys.exit({status!r})", [], code)
        try:
            from mpi4py.run import set_abort_status
            set_abort_status(status)
        except Exception:
            pass
    _exit(status)


class _MpiStartSignal:
    """A meta path finder that finds nothing: the first time ``mpi4py.MPI`` is looked up it
    tells the wrapper that this rank is starting MPI, then leaves the import to the others."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "mpi4py.MPI":
            sys.meta_path.remove(cls)
            import signal
            try:
                os.kill(int(os.environ[_WRAPPER_VAR]), signal.SIGUSR2)
            except (OSError, ValueError, KeyError):
                pass
        return None


def _install():
    if os.environ.get(_RECORD_VAR) and os.environ.get(_WRAPPER_VAR):
        sys.excepthook = _record_and_abort
        sys.exit = _exit_and_abort
        sys.meta_path.insert(0, _MpiStartSignal)


def _chain():
    """Run the sitecustomize this file shadows (a user's or the distribution's)."""
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_install()
_chain()
