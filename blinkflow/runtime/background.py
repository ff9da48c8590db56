"""The background thread: every MPI call of the runtime happens here.

``init`` starts it and waits until it has set the job up (:func:`job.discover`, the backend);
then it negotiates, executes and inspects stalls in rounds: at once when a tensor is submitted,
back to back while tensors are pending, else every ``BLINKFLOW_CYCLE_TIME`` ms. It stops
when any rank asks to shut down (all ranks leave the loop in the same cycle, so collective
teardown such as freeing shared-memory windows stays matched), or when MPI reports a failed peer.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, Optional

from ..backends.base import BackendContext
from ..config import Config
from ..errors import BackendError, BlinkflowError, ShutdownError
from . import liveness, startup
from .executor import BatchTimeline, Executor
from .job import Job, discover
from .log import configure, logger
from .messages import Response, shown
from .negotiation import Negotiator
from .response_cache import ResponseCache
from .stall import StallInspector
from .state import SharedState
from .timeline import Timeline


#: The reason a rank gives when its user called ``shutdown()``.
SHUTDOWN_CALLED = "shutdown() was called"


def make_backend(device: str, config: Config, ctx: BackendContext):
    """The executor for arrays on ``device``: cpu (numpy) or cuda (cupy)."""
    if device == "cuda":
        if config.backend == "cpu":
            raise BackendError("a CuPy array was given but BLINKFLOW_BACKEND=cpu; pass numpy arrays or set "
                               "BLINKFLOW_BACKEND=auto")
        try:
            from ..backends.cuda import CudaBackend
        except ImportError as e:
            raise BackendError(f"the cuda backend cannot load ({e}); install cupy for your CUDA version") from None
        return CudaBackend(ctx)
    from ..backends.cpu import CpuBackend

    return CpuBackend(ctx)


class Engine:
    """Owns the background thread and everything only it touches."""

    def __init__(self, config: Config, comm):
        self.config = config
        self._user_comm = comm
        self.state: Optional[SharedState] = None
        self.job: Optional[Job] = None
        self.mpi_threads_supported = False
        self.init_error: Optional[BaseException] = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="blinkflow-background", daemon=True)
        self._watchdog: Optional[liveness.Watchdog] = None
        self._backends: Dict[str, Any] = {}
        self._timeline: Optional[Timeline] = None
        self.peer_failed = False
        """A peer died: MPI calls may never return, so nobody waits for this thread."""
        self.negotiator: Optional[Negotiator] = None
        self._executor: Optional[Executor] = None
        self.broken = False
        """The loop died mid-cycle: this rank's MPI state cannot be trusted (nor MPI_Finalize)."""
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

    def tell_departure(self) -> None:
        """This rank stops because of a peer's failure: tell the ranks on this machine which rank
        that is, so their watchdogs, should they see this process gone too, blame the right one."""
        failure = self.state.failure if self.state is not None else None
        cause = getattr(failure, "rank", None)
        if self.side is not None and self.side.concurrent and cause is not None and cause != self.job.rank:
            mates = [r for r in range(self.job.size) if self.job.machines[r] == self.job.machines[self.job.rank]]
            self.side.tell(mates, f"rank {self.job.rank} leaves because rank {cause} failed", cause=cause)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # ---- background thread --------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._setup()
        except BaseException as e:  # noqa: BLE001 - handed to init() on the user thread
            self.init_error = e
            startup.tell_setup_failed(self.side, e)  # peers may wait for this rank in a collective
            self._ready.set()
            return
        self._ready.set()
        clean = False
        try:
            self._loop()
            clean = True
        except BaseException as e:  # noqa: BLE001 - every failure must reach the waiting users
            self.broken = True
            error = self._as_shutdown_error(e)
            self.state.fail(error)
            if not self.peer_failed and self.side is not None:  # peers may wait inside a collective for us
                self.side.tell_all(str(error))
        finally:
            if self._watchdog is not None:
                self._watchdog.stop()
            if clean:
                self._teardown()
            elif self._timeline is not None:
                self._timeline.close()

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
        job = discover(comm, self.config)
        self.job = job
        self.state = SharedState(self.config, job.rank)
        if job.rank == 0:
            logger.info("configuration:\n" + self.config.describe())
        if self.config.timeline:
            self._timeline = Timeline(self.config.timeline, job.rank)
        self._batch_timeline = BatchTimeline()
        self._ctx = job.backend_context(self.config, self._batch_timeline if self._timeline else None)
        self._backend("cpu")
        self._watchdog = liveness.Watchdog(job.rank, job.machines, job.hosts, job.pids, self._on_peer_failure,
                                           self.side, self.config.stall_check_time_seconds,
                                           self.config.stall_shutdown_time_seconds)
        self._watchdog.start()

    def _on_peer_failure(self, error: ShutdownError) -> None:
        self.peer_failed = True
        self.state.fail(error)
        self.tell_departure()  # now: however this process leaves later, it is not blamed

    def _backend(self, device: str):
        backend = self._backends.get(device)
        if backend is None:
            backend = self._backends[device] = make_backend(device, self.config, self._ctx)
        return backend

    def _loop(self) -> None:
        job, state, config = self.job, self.state, self.config
        stall = StallInspector(config.stall_check_time_seconds, config.stall_shutdown_time_seconds)
        cache = ResponseCache(config.cache_capacity, job.rank)
        from mpi4py import MPI

        negotiator = self.negotiator = Negotiator(job.comm, job.rank, job.size, cache, stall.report_after_s(),
                                                  MPI.BAND)
        cache_evict = cache.evict

        def evict(bit: int) -> None:
            cache_evict(bit)
            negotiator.on_evict(bit)

        cache.evict = evict
        executor = self._executor = Executor(job.rank, job.size, job.comm, self._backend, state, config.fusion_threshold,
                            self._timeline, self._batch_timeline)
        cycle_s = config.cycle_time / 1000.0
        stalled_s = 0.0

        def done(response: Response) -> None:
            cache.put(response)

        while True:
            new = state.drain()
            if self._timeline is not None:
                for entry in new:
                    self._timeline.end(entry.name, "QUEUED")
                    self._timeline.start(entry.name, "NEGOTIATE")
            responses, reasons = negotiator.cycle(new, state.shutdown_reason, state.work_submitted,
                                                  state.abort_check)
            # Every rank leaves the negotiation at about the same moment: pacing the next cycle
            # from here (not from this cycle's start, which differs by how long each rank waited)
            # keeps the ranks' cycles aligned, so an idle cycle hardly waits for its peers.
            synced = time.monotonic()
            if responses and logger.isEnabledFor(logging.DEBUG):
                logger.debug("running %s", ", ".join(f"{r.kind.label} {shown(r.name)}" for r in responses))
            executor.run(responses, negotiator.pending, done)
            if reasons is not None:
                state.fail(self._shutdown_error(reasons))
                return
            if state.failure is not None:  # the watchdog saw a dead peer: MPI may hang from now on
                raise state.failure
            if negotiator.table is not None:
                reason = stall.inspect(negotiator.table)
                if reason is not None:
                    state.request_shutdown(reason)
            # Nothing pending here: sleep until a submission (or a shutdown request) wakes the
            # thread, or for a cycle at most. Submissions are negotiated at once on every rank, so
            # the cycle is not a latency: only stall checks, join and shutdown ride on idle
            # rounds, and rare idle rounds (20 ms by default) leave a computing rank its CPU and
            # seldom overlap a submission. With tensors pending (some rank has not submitted
            # them yet) the next round starts at once and waits quietly for the late ranks,
            # which join it the moment they submit: a collective's latency is the ranks' skew.
            # A round that moved nothing while tensors are pending (each rank holds some that
            # others lack, e.g. submitted in different orders) completes at once and would
            # repeat in a tight loop: back off, doubling up to 1 ms, until something happens.
            stalled_s = 0.0 if responses or new else min(max(2 * stalled_s, 50e-6), min(cycle_s, 1e-3))
            if not negotiator.pending:
                state.wait_for_work(cycle_s - (time.monotonic() - synced))
            elif stalled_s:
                state.wait_for_work(stalled_s)

    def _shutdown_error(self, reasons) -> ShutdownError:
        who = [(r, why) for r, why in enumerate(reasons) if why is not None]
        text = "; ".join(f"rank {r}: {why}" for r, why in who)
        # Only after shutdown() on purpose can every rank start again; a rank that is exiting cannot.
        again = ("; call blinkflow.init() again to run more collectives"
                 if all(why == SHUTDOWN_CALLED for _, why in who) else "")
        return ShutdownError(f"blinkflow was shut down ({text}){again}",
                             rank=None if who[0][0] == self.job.rank else who[0][0])

    def _as_shutdown_error(self, error: BaseException) -> BlinkflowError:
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
        running = self._executor.describe_running() if self._executor is not None else ""
        during = f" while running {running}" if running else ""
        logger.exception("the background thread failed%s", during)
        return ShutdownError(f"the blinkflow runtime of rank {self.job.rank} failed{during}: "
                             f"{type(error).__name__}: {error}. The job cannot continue; the traceback is in this "
                             "rank's log.", rank=self.job.rank)

    def _teardown(self) -> None:
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - teardown must go on; report and continue
                logger.exception("closing backend %s failed", getattr(backend, "name", "?"))
        self.job.free()
        if self._timeline is not None:
            self._timeline.close()
