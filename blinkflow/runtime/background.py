"""The background thread: every MPI call of the global process set happens here.

``init`` starts it and waits until it has set the job up (:func:`job.discover`, the backend,
the process sets of ``init(process_sets=...)``); then it runs the global set's
:class:`~.set_loop.SetLoop`: it negotiates, executes and inspects stalls in rounds, at once
when a tensor is submitted, back to back while tensors are pending, else every
``BLINKFLOW_CYCLE_TIME`` ms. Adding and removing process sets are responses of this loop
(:mod:`.set_threads`); every other set runs on a thread of its own. It stops when any rank asks
to shut down (all ranks leave the loop in the same cycle, so collective teardown such as freeing
shared-memory windows stays matched; the sets stop after it), or when MPI reports a failed peer.
"""
from __future__ import annotations

import threading
from typing import List, Optional, Sequence, Tuple

from ..config import Config
from ..errors import BackendError, BlinkflowError, ProcessSetError, ShutdownError
from . import liveness, startup
from .job import Job, discover
from .log import configure, logger
from .messages import Kind, Response
from .set_loop import SetLoop, make_backend  # noqa: F401  (make_backend: re-exported)
from .set_threads import ProcessSets, static_sets
from .state import SharedState
from .timeline import Timeline


#: The reason a rank gives when its user called ``shutdown()``.
SHUTDOWN_CALLED = "shutdown() was called"


class Engine:
    """Owns the background thread (the global process set's loop), the other sets' threads, and
    everything only they touch."""

    def __init__(self, config: Config, comm, process_sets: Sequence[object] = (), handles=None, device=None):
        self.config = config
        self._device = device
        """The device this rank keeps from the job it re-forms from (None: discovered)."""
        self._handles = handles
        """The process's handle table (None: one of this engine's own)."""
        self._user_comm = comm
        self._static_sets = list(process_sets)
        """This rank's ``init(process_sets=...)``: tuples of global ranks (or the reason one is refused)."""
        self.state: Optional[SharedState] = None
        self.job: Optional[Job] = None
        self.mpi_threads_supported = False
        self.init_error: Optional[BaseException] = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="blinkflow-background", daemon=True)
        self._watchdog: Optional[liveness.Watchdog] = None
        self._timeline: Optional[Timeline] = None
        self.peer_failed = False
        """A peer died: MPI calls may never return, so nobody waits for this thread."""
        self.loop: Optional[SetLoop] = None
        """The global set's loop (negotiator, executor, backends); run by this engine's thread."""
        self.sets: Optional[ProcessSets] = None
        """The other process sets: the registry, and this rank's set threads."""
        self.broken = False
        """A loop died mid-cycle: this rank's MPI state cannot be trusted (nor MPI_Finalize)."""
        self.side = None
        """The side channel (:mod:`.side_channel`): init's and the watchdog's messages to peers."""

    # ---- user-thread side ---------------------------------------------------------------------
    def start(self) -> None:
        from mpi4py import MPI

        # Every rank must be here before the first collective, and hear of one whose set-up fails
        # (startup.py); both within BLINKFLOW_START_TIMEOUT.
        self.side = startup.arrive(self._user_comm if self._user_comm is not None else MPI.COMM_WORLD, self.config)
        self._thread.start()
        try:
            startup.wait_for_setup(self.side, self._ready, self.config)
        except BlinkflowError:
            self.broken = True  # the set-up thread waits in a collective that cannot complete
            raise
        if self.init_error is not None:
            self._thread.join()
            raise self.init_error

    def stop(self, reason: str) -> None:
        """Ask the job to stop and wait for this rank's thread (not if a peer died: MPI may never
        return, and the thread is a daemon)."""
        self.state.request_shutdown(reason)
        while self._thread.is_alive():
            self._thread.join(0.25)
            if self.peer_failed:
                break
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.side is not None and not (self.peer_failed or self.broken):
            self.side.close()

    def tell_departure(self, failure: Optional[BaseException] = None) -> None:
        """This rank stops because of a peer's failure (``failure``, else the runtime's recorded
        one): tell the ranks on this machine which rank that is, so their watchdogs, should they
        see this process gone too, blame the right one."""
        if failure is None:
            failure = self.state.failure if self.state is not None else None
        cause = getattr(failure, "rank", None)
        if self.side is not None and self.side.concurrent and cause is not None and cause != self.job.rank:
            mates = [r for r in range(self.job.size) if self.job.machines[r] == self.job.machines[self.job.rank]]
            self.side.tell(mates, f"rank {self.job.rank} leaves because rank {cause} failed", cause=cause,
                           relay=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def _backends(self):
        """The global set's backends by device (tests look at their counters)."""
        return self.loop.backends if self.loop is not None else {}

    @property
    def negotiator(self):
        return self.loop.negotiator if self.loop is not None else None

    def loop_for(self, set_id: int) -> Optional[SetLoop]:
        """The loop of process set ``set_id`` on this rank, or None when this rank is not in it."""
        return self.loop if set_id == 0 else self.sets.loop(set_id)

    def start_timeline(self, path: str) -> None:
        """Write the timeline to ``path`` from now on (Horovod's ``start_timeline``)."""
        old = self._timeline
        self._use_timeline(Timeline(path, self.job.rank))
        if old is not None:
            old.close()

    def stop_timeline(self) -> None:
        old = self._timeline
        self._use_timeline(None)
        if old is not None:
            old.close()

    def _use_timeline(self, timeline: Optional[Timeline]) -> None:
        self._timeline = timeline
        self.sets.timeline = timeline
        for loop in [self.loop] + [thread.loop for thread in list(self.sets.threads.values())]:
            loop.set_timeline(timeline)

    # ---- background thread --------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._setup()
        except BaseException as e:  # noqa: BLE001 - handed to init() on the user thread
            self.init_error = e
            startup.tell_setup_failed(self.side, e)  # peers may wait for this rank in a collective
            if isinstance(e, ProcessSetError) and self.loop is not None:
                self._release()  # every rank refused the same sets at the same point
            self._ready.set()
            return
        self._ready.set()
        clean = False
        try:
            reasons = self.loop.run()
            self.state.fail(self._shutdown_error(reasons))
            clean = True
        except BaseException as e:  # noqa: BLE001 - every failure must reach the waiting users
            self._loop_failed(self.loop, e)
        finally:
            if self._watchdog is not None:
                self._watchdog.stop()
            if clean:
                self._teardown()
            elif self._timeline is not None:
                self._timeline.close()

    def _loop_failed(self, loop: SetLoop, error: BaseException) -> None:
        """A set's loop died mid-cycle (its thread, or the global one): MPI state is not to be
        trusted any more, so the whole runtime stops and the peers hear of it."""
        self.broken = True
        failure = self._as_shutdown_error(error, loop)
        self.state.fail(failure)
        if self.sets is not None:
            self.sets.fail_all(failure)
        if not self.peer_failed and self.side is not None:  # peers may wait inside a collective for us
            self.side.tell_all(str(failure))

    def _setup(self) -> None:
        from mpi4py import MPI

        base = self._user_comm if self._user_comm is not None else MPI.COMM_WORLD
        comm = base.Dup()  # a private communicator: our traffic never matches the user's
        comm.Set_errhandler(MPI.ERRORS_RETURN)  # ULFM reports a dead peer as an error, not an abort
        configure(self.config.log_level, comm.Get_rank())
        self.mpi_threads_supported = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
            raise BackendError("MPI was initialised without thread support; blinkflow calls MPI from its "
                               "background thread. Leave mpi4py.rc.thread_level at its default ('multiple').")
        job = discover(comm, self.config, self._device)
        self.job = job
        self.state = SharedState(self.config, job.rank, self._handles)
        if job.rank == 0:
            logger.info("configuration:\n" + self.config.describe())
        if self.config.timeline:
            self._timeline = Timeline(self.config.timeline, job.rank)
        self.loop = SetLoop(0, job, self.config, self.state, self._timeline,
                            hooks={Kind.ADD_PROCESS_SET: self._add_set, Kind.REMOVE_PROCESS_SET: self._remove_set})
        self.loop.backend("cpu")
        self.sets = ProcessSets(job, self.config, self.state.handles, self._timeline, self._loop_failed,
                                lambda: self.peer_failed)
        for ranks in static_sets(self._static_sets, job.comm):  # every rank: the same sets, in one order
            self._add_ranks(ranks)
        self._watchdog = liveness.Watchdog(job.rank, job.machines, job.hosts, job.pids, self._on_peer_failure,
                                           self.side, self.config.stall_check_time_seconds,
                                           self.config.stall_shutdown_time_seconds)
        self._watchdog.start()

    def _add_ranks(self, ranks: Tuple[int, ...]) -> int:
        if not self.mpi_threads_supported:
            raise ProcessSetError("process sets need MPI_THREAD_MULTIPLE (each set runs on a thread of its own); "
                                  "leave mpi4py.rc.thread_level at its default ('multiple')")
        return self.sets.add(ranks)

    def _add_set(self, response: Response) -> int:
        """The global set's ADD_PROCESS_SET response, run at the same point on every rank."""
        return self._add_ranks(tuple(response.first().shape))

    def _remove_set(self, response: Response) -> bool:
        return self.sets.remove(response.first().root)

    def _on_peer_failure(self, error: ShutdownError) -> None:
        self.peer_failed = True
        # Told before any user thread can see the error: a user that catches it and leaves at
        # once (os._exit) must not take the notice with it, or peers that see this process gone
        # too would blame it beside the rank that failed.
        self.tell_departure(error)
        self.state.fail(error)
        if self.sets is not None:
            self.sets.fail_all(error)

    def _shutdown_error(self, reasons: List[Optional[str]]) -> ShutdownError:
        who = [(r, why) for r, why in enumerate(reasons) if why is not None]
        text = "; ".join(f"rank {r}: {why}" for r, why in who)
        # Only after shutdown() on purpose can every rank start again; a rank that is exiting cannot.
        again = ("; call blinkflow.shutdown() then blinkflow.init() on every rank to run more collectives"
                 if all(why == SHUTDOWN_CALLED for _, why in who) else "")
        return ShutdownError(f"blinkflow has been shut down ({text}){again}",
                             rank=None if who[0][0] == self.job.rank else who[0][0])

    def _as_shutdown_error(self, error: BaseException, loop: Optional[SetLoop] = None) -> BlinkflowError:
        if isinstance(error, ShutdownError):
            return error
        if self.peer_failed and self.state.failure is not None:
            return self.state.failure
        if liveness.is_process_failure(error):
            self.peer_failed = True
            dead = liveness.failed_ranks(self.job.comm) or (self._watchdog.dead() if self._watchdog else [])
            if dead:
                blamed = liveness.culprits(dead, self._watchdog.departed if self._watchdog else {})
                return liveness.dead_peer_error(blamed, self.job.hosts, f"MPI reports: {error}")
            return ShutdownError(f"a peer rank failed (MPI reports: {error}); the job cannot continue")
        running = loop.describe_running() if loop is not None else ""
        during = f" while running {running}{loop.label}" if running else ""
        logger.exception("the background thread failed%s", during)
        return ShutdownError(f"the blinkflow runtime of rank {self.job.rank} failed{during}: "
                             f"{type(error).__name__}: {error}. The job cannot continue; the traceback is in this "
                             "rank's log.", rank=self.job.rank)

    def _teardown(self) -> None:
        # Every rank left the global loop in the same cycle; its sets stop now, each in a last
        # cycle its members agree on, before the job's communicators go.
        self._release()
        if self._timeline is not None:
            self._timeline.close()

    def _release(self) -> None:
        if self.sets is not None:
            self.sets.stop_all("the job is shutting down", self.state.failure or ShutdownError("blinkflow stopped"))
        self.loop.close_backends()
        self.job.free()
