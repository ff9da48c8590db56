"""One process set's engine: its negotiation, response cache, fusion, executor and backends.

Every process set is its own communicator (Horovod's model): the global set is the job itself,
and each set added by ``init(process_sets=...)`` or ``add_process_set`` owns a split of the job's
communicator, its own :class:`~.job.Job` (layout, local and cross communicators, the topology
cut down to its devices and the plans agreed for them), a :class:`~.state.SharedState` (queue and
names in flight: a name is unique per set), a negotiator with its own response cache and
coordinator (rank 0 of the set), an executor that fuses its all-reduces, and its backends.

:meth:`SetLoop.run` is the loop a background thread runs for one set, in rounds: at once when a
tensor is submitted, back to back while tensors are pending, else every ``BLINKFLOW_CYCLE_TIME``
ms. It returns when every member of the set agreed to stop (the job shuts down, or the set is
removed), with every member's reason. The global set's loop runs on the engine's thread (see
:mod:`.background`), each other set's on a thread of its own (see :mod:`.process_sets`).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional

from ..backends.base import BackendContext
from ..config import Config
from ..errors import BackendError
from .autotune import Autotuner, Knobs
from .executor import BatchTimeline, Executor
from .job import Job
from .log import logger
from .messages import Kind, Response, shown
from .negotiation import Negotiator
from .response_cache import ResponseCache
from .stall import StallInspector
from .state import SharedState


def make_backend(device: str, ctx: BackendContext):
    """The executor for arrays on ``device`` (the requests' placement, :mod:`blinkflow.placement`):
    cpu (numpy) or cuda (cupy)."""
    if device == "cuda":
        try:
            from ..backends.cuda import CudaBackend
        except ImportError as e:
            raise BackendError(f"the cuda backend cannot load ({e}); install cupy for your CUDA version") from None
        return CudaBackend(ctx)
    from ..backends.cpu import CpuBackend

    return CpuBackend(ctx)


class SetLoop:
    """What one process set's background thread owns and runs.

    ``set_id`` is 0 for the global set; ``job`` is the set's own (its ranks are the set's, in
    order; ``job.ranks`` maps them to global ranks). ``hooks`` run the responses of kinds only the
    global set negotiates (adding and removing process sets), on its thread.
    """

    def __init__(self, set_id: int, job: Job, config: Config, state: SharedState, timeline=None,
                 hooks: Optional[Dict[Kind, Callable[[Response], Any]]] = None):
        self.set_id = set_id
        self.job = job
        self.config = config
        self.state = state
        self.timeline = timeline
        self.batch_timeline = BatchTimeline()
        self.ctx = job.backend_context(config, self.batch_timeline if timeline is not None else None,
                                       failure=state.abort_check)
        self.backends: Dict[str, Any] = {}
        self.hooks = hooks or {}
        self.negotiator: Optional[Negotiator] = None
        self.executor: Optional[Executor] = None
        self.label = "" if set_id == 0 else f" in process set {set_id} (ranks {list(job.ranks)})"
        """What errors of this set add after a tensor's name, so they say which set they are about."""

    def set_timeline(self, timeline) -> None:
        """Start or stop (None) writing this set's phases to ``timeline`` (``start_timeline``):
        the executor, the batch tracks and the backends' context read it on every call."""
        self.timeline = timeline
        self.batch_timeline.timeline = timeline
        self.ctx.timeline = self.batch_timeline if timeline is not None else None
        if self.executor is not None:
            self.executor.timeline = timeline

    def backend(self, device: str):
        backend = self.backends.get(device)
        if backend is None:
            backend = self.backends[device] = make_backend(device, self.ctx)
        return backend

    def describe_running(self) -> str:
        return self.executor.describe_running() if self.executor is not None else ""

    def run(self) -> List[Optional[str]]:
        """Negotiate and execute until the set's members agree to stop; returns every member's
        reason (None for members that had none). Raises the runtime's failure (a dead peer)."""
        job, state, config = self.job, self.state, self.config
        stall = StallInspector(config.stall_check_time_seconds, config.stall_shutdown_time_seconds)
        cache = ResponseCache(config.cache_capacity, job.rank)
        from mpi4py import MPI

        negotiator = self.negotiator = Negotiator(job.comm, job.rank, job.size, cache, stall.report_after_s(),
                                                  MPI.BAND, ranks=job.global_ranks, label=self.label)
        cache_evict = cache.evict

        def evict(bit: int) -> None:
            cache_evict(bit)
            negotiator.on_evict(bit)

        cache.evict = evict
        executor = self.executor = Executor(job.rank, job.size, job.comm, self.backend, state,
                                            config.fusion_threshold, self.timeline, self.batch_timeline,
                                            hooks=self.hooks, ranks=job.global_ranks)
        timeline = self.timeline
        cycle_s = config.cycle_time / 1000.0
        stalled_s = 0.0
        tuner = self._autotuner() if negotiator.table is not None else None

        def done(response: Response) -> None:
            cache.put(response)

        while True:
            new = state.drain()
            if timeline is not None:
                _mark_negotiating(timeline, new)
            responses, reasons = negotiator.cycle(new, state.shutdown_reason, state.work_submitted,
                                                  state.abort_check)
            submitted = bool(new)
            # Every rank leaves the negotiation at about the same moment: pacing the next cycle
            # from here (not from this cycle's start, which differs by how long each rank waited)
            # keeps the ranks' cycles aligned, so an idle cycle hardly waits for its peers.
            synced = time.monotonic()
            if responses and logger.isEnabledFor(logging.DEBUG):
                logger.debug("running %s", ", ".join(f"{r.kind.label} {shown(r.name)}" for r in responses))
            executor.run(responses, negotiator.pending, done)
            if tuner is not None and executor.last_allreduce_bytes:
                negotiator.proposed_settings = tuner.observe(executor.last_allreduce_bytes) \
                    or negotiator.proposed_settings
            knobs = negotiator.agreed_settings
            if knobs is not None:  # every rank, after the same responses
                executor.set_fusion_threshold(knobs.fusion_threshold)
                cycle_s = knobs.cycle_time_ms / 1000.0
                if timeline is not None:
                    timeline.instant("autotune", "SETTINGS", {"fusion_threshold": knobs.fusion_threshold,
                                                  "cycle_time_ms": knobs.cycle_time_ms})
            if reasons is not None:
                return reasons
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
            stalled_s = 0.0 if responses or submitted else min(max(2 * stalled_s, 50e-6), min(cycle_s, 1e-3))
            if not negotiator.pending:
                state.wait_for_work(cycle_s - (time.monotonic() - synced))
            elif stalled_s:
                state.wait_for_work(stalled_s)

    def _autotuner(self) -> Optional[Autotuner]:
        """The global set's coordinator searches the knobs when ``BLINKFLOW_AUTOTUNE=1``; every
        other rank only applies what it broadcasts."""
        config = self.config
        if self.set_id != 0 or not config.autotune:
            return None
        return Autotuner(Knobs(config.fusion_threshold, config.cycle_time),
                         warmup_samples=config.autotune_warmup_samples,
                         steps_per_sample=config.autotune_steps_per_sample,
                         max_samples=config.autotune_bayes_opt_max_samples,
                         noise=config.autotune_gaussian_process_noise, log_file=config.autotune_log_file)

    def close_backends(self) -> None:
        for backend in self.backends.values():
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - teardown must go on; report and continue
                logger.exception("closing backend %s failed", getattr(backend, "name", "?"))
        self.backends.clear()


def _mark_negotiating(timeline, submitted) -> None:
    """Timeline: the ``submitted`` requests leave the queue and start negotiating."""
    for request, _ in submitted:
        timeline.end(request.name, "QUEUED")
        timeline.start(request.name, "NEGOTIATE")
