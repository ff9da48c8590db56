"""Starting and stopping this process's runtime: ``init``, ``shutdown`` and the exit hook.

``init`` makes an :class:`~.background.Engine` and keeps it in :data:`~.global_state.RUNTIME`;
``shutdown`` stops it on every rank. At interpreter exit the hook stops a running engine; when
a peer died or this rank's loop broke, MPI_Finalize would wait forever for ranks that cannot
arrive, so the hook leaves at once with status 1 instead (after telling the peers why).
"""
from __future__ import annotations

import atexit
import os
import sys
from typing import Optional

from ..config import apply_mpi_defaults, get_config
from ..errors import BlinkflowError, ConfigError, ShutdownError
from . import startup
from .background import SHUTDOWN_CALLED, Engine
from .global_state import RUNTIME
from .messages import clipped
from .mpi_start import watched_mpi_init
from .process_sets import init_entries, ranks_of_entry, register_entries


def init(comm=None, process_sets=None) -> None:
    """Start the runtime on ``comm`` (default ``MPI.COMM_WORLD``; or a list of its ranks, which
    then call ``init`` together); collective over it.

    Discovers the hosts and topology, makes the all-reduce plan, checks that every rank made the
    same one (PlanError naming the ranks otherwise) and starts the background thread.
    ``process_sets`` (Horovod's): a list of :class:`ProcessSet` (ranks or MPI communicators) to
    register now, in addition to ``global_process_set``; ``"dynamic"`` or None for none (sets can
    always be added later with ``add_process_set``). Calling ``init`` again while initialized does
    nothing, also after a peer's exit or ``shutdown()`` stopped the job (the next collective
    raises ShutdownError); after ``shutdown()`` on this rank it starts afresh. Every rank must
    call it within ``BLINKFLOW_START_TIMEOUT`` seconds (60) of the others, and a rank whose set-up
    fails tells the others: InitError names the ranks missing or failed.
    """
    start(comm, process_sets)


def start(comm=None, process_sets=None, device=None) -> None:
    """``init``; ``device``: the topology device this rank drove in the job it re-forms from
    (:mod:`blinkflow.elastic.reform`), which it keeps whatever its new rank."""
    with RUNTIME.lock:
        running = RUNTIME.engine
        if running is not None:
            if running.alive and comm is not None and not isinstance(comm, (list, tuple, range)) \
                    and not _same_processes(comm, running.job.comm):
                raise BlinkflowError("blinkflow.init(comm): blinkflow is already running on another communicator "
                                     f"({running.job.size} ranks); call blinkflow.shutdown() on every rank first")
            if running.alive:
                _use_rank_gpu(running)  # init() from another thread: that thread works on the rank's GPU too
            return  # Horovod's rule: otherwise a no-op; a stopped job says so at the next collective
        if RUNTIME.broken_by is not None and comm is None:
            raise ShutdownError(f"blinkflow cannot start again on a job whose rank failed ({RUNTIME.broken_by}); "
                                "restart the job", rank=getattr(RUNTIME.broken_by, "rank", None))
        if "mpi4py.MPI" not in sys.modules:  # (a communicator given means it is loaded; a list does not)
            apply_mpi_defaults()  # before MPI_Init, which importing mpi4py.MPI performs
            watched_mpi_init(get_config().start_timeout)
        comm = _communicator(comm)
        entries = init_entries(process_sets)
        base = comm
        if base is None:
            from mpi4py import MPI

            base = MPI.COMM_WORLD
        engine = Engine(get_config(), comm, [ranks_of_entry(e, base) for e in entries], handles=RUNTIME.handles,
                        device=device)
        try:
            engine.start()
        except BaseException as error:
            if engine.broken or startup.leaves_peers_waiting(error):
                RUNTIME.remember_broken(engine, error)  # MPI may be inside a collective that cannot finish
            raise
        RUNTIME.engine = engine
        RUNTIME.forget_names()
        register_entries(engine, entries)
        _use_rank_gpu(engine)


def _use_rank_gpu(engine) -> None:
    """The rank's GPU becomes current in the calling thread when the cuda backend is usable
    (:func:`blinkflow.placement.cuda_usable`; :func:`blinkflow.backends.cuda.device.use_rank_device`)."""
    from ..placement import cuda_usable

    if cuda_usable(engine.config):
        from ..backends.cuda.device import use_rank_device

        use_rank_device(engine.job.layout)


def _communicator(comm):
    """``init``'s ``comm``: a communicator, or a list of COMM_WORLD ranks made into one (collective
    over those ranks)."""
    if not isinstance(comm, (list, tuple, range)):
        return comm
    from mpi4py import MPI

    ranks = sorted(int(r) for r in comm)
    world = MPI.COMM_WORLD
    if world.Get_rank() not in ranks:
        raise BlinkflowError(f"blinkflow.init(comm={ranks}): rank {world.Get_rank()} of MPI.COMM_WORLD is not in the "
                             "list; only the listed ranks call init")
    return world.Create_group(world.Get_group().Incl(ranks))


def _same_processes(comm, running) -> bool:
    """Whether ``comm`` holds the running job's processes in its order (the job runs on a private
    duplicate, which compares as congruent); anything but a communicator is a typed error."""
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise BlinkflowError(f"blinkflow.init(comm): expected an mpi4py communicator, got {type(comm).__name__}")
    return MPI.Comm.Compare(comm, running) in (MPI.IDENT, MPI.CONGRUENT)


def shutdown() -> None:
    """Stop the runtime on every rank (any rank calling it stops the job's collectives; calls still
    in flight elsewhere raise ShutdownError). Safe to call twice or before ``init``."""
    with RUNTIME.lock:
        engine, RUNTIME.engine = RUNTIME.engine, None
    if engine is not None:
        engine.stop(SHUTDOWN_CALLED)
        RUNTIME.remember_if_broken(engine)


def is_initialized() -> bool:
    return RUNTIME.engine is not None


def _exit_hook() -> None:
    engine = RUNTIME.engine
    if RUNTIME.broken_by is not None or (engine is not None and (engine.peer_failed or engine.broken)):
        # A peer died, or this rank's loop died mid-collective: MPI_Finalize would wait forever
        # for ranks that cannot arrive (also after the user called shutdown() on the error).
        # Leave now with a failure status; mpirun (or the peers' watchdogs) then end the others,
        # told first which rank this one leaves because of.
        failed = engine if engine is not None and (engine.peer_failed or engine.broken) else RUNTIME.broken_engine
        if failed is not None and failed.job is not None:
            failed.tell_departure()
        _record_for_launcher(failed)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if engine is not None:
        with RUNTIME.lock:
            RUNTIME.engine = None
        engine.stop(_exit_reason())
        RUNTIME.remember_if_broken(engine)
    if RUNTIME.ranks_lost or _elastic_job():
        # Also without a loss: an elastic job across hosts runs ULFM's failure detector, whose
        # finalize can spin for good (for a peer that finalized first, or one spawned later).
        _finalize_or_leave(FINALIZE_AFTER_LOSS_S)


def _elastic_job() -> bool:
    """Whether this process runs an elastic job (``BLINKFLOW_ELASTIC_MIN_NP`` > 0). A setting
    that cannot be read is not: its ConfigError reached the script already (from ``init()``, or
    from the first ``get_config()``), and raising it again here would print a second traceback
    for one error, under "Exception ignored in atexit callback"."""
    try:
        return get_config().elastic_min_np > 0
    except ConfigError:
        return False


#: How long MPI_Finalize may take in an elastic job before the process leaves without it.
FINALIZE_AFTER_LOSS_S = 5.0


def _finalize_or_leave(seconds: float) -> None:
    """MPI_Finalize now, or leave without it after ``seconds``: once an elastic job went on
    without ranks that died, Open MPI's finalize waits, in about one job in ten, for them in its
    closing fence. The status is then 0, or 1 after an uncaught exception (what the interpreter
    would have returned, save a ``sys.exit`` with another code)."""
    import threading

    from mpi4py import MPI

    status = 1 if getattr(sys, "last_value", None) is not None else 0

    def leave() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()
    if not MPI.Is_finalized():
        _finalize_without_gil(MPI)
    timer.cancel()


def _finalize_without_gil(MPI) -> None:
    """MPI_Finalize with the GIL released, so the timer that leaves without it can run: mpi4py's
    ``Finalize`` keeps the GIL, and Open MPI's failure detector (on in elastic jobs, which must
    notice a host that went silent) spins in its finalize for a peer that died. ctypes releases
    the GIL around a foreign call; the library is the one mpi4py loaded."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            path = next(line.split()[-1] for line in maps if "/libmpi.so" in line)
        finalize = ctypes.CDLL(path).MPI_Finalize
    except (OSError, StopIteration, AttributeError):   # not Linux, or an MPI named otherwise
        MPI.Finalize()
        return
    finalize()


def _exit_reason() -> str:
    """Why this rank's runtime stops at interpreter exit, for the peers still waiting on it."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # set for an uncaught exception
    if error is not None:
        return f"its process is exiting after an uncaught {type(error).__name__}: {clipped(str(error))}"
    return "its process is exiting (its script ended or called sys.exit without blinkflow.shutdown())"


def _record_for_launcher(engine: Optional[Engine]) -> None:
    """Under blinkrun, say why this rank exits with status 1 and which rank it blames (the
    launcher then names the rank at fault first, not this casualty). The hook is blinkrun's
    sitecustomize; plain mpirun has none."""
    record = getattr(sys.modules.get("sitecustomize"), "blinkrun_record_failure", None)
    failure = RUNTIME.broken_by or (engine.state.failure if engine is not None and engine.state is not None else None)
    if record is not None and failure is not None:
        record(f"{type(failure).__name__}: {clipped(str(failure))}", getattr(failure, "rank", None))


atexit.register(_exit_hook)  # after mpi4py's own atexit, so it runs before MPI_Finalize

