"""Waiting for MPI requests without spinning a core.

A blocking MPI call busy-polls until every rank has arrived (Open MPI and MPICH both spin for
latency). The background thread's negotiation waits on *other ranks' cycles*, which are not
aligned with its own: blocking there burned 20-70% of a core per idle rank on a 2-core host,
taken from the training step's compute and from the application's own MPI calls, which contend
for MPI's progress engine under ``MPI_THREAD_MULTIPLE``. The executors' wires wait the same way
for a peer's control message: while gradient buckets are reduced during backprop, the peer is
often still computing, and a spinning wait took a core from it (on a 2-core host 6 ms of a
26 ms training step). Instead the background thread starts a non-blocking operation and tests
it, sleeping between tests in steps that grow with the time already waited, so the added latency
stays a small fraction of the wait itself. (In ``backends``, so that the runtime's negotiation
and the backends' wires share it.)
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Optional

_yield = getattr(os, "sched_yield", lambda: None)  # not on every platform

#: Test without sleeping this long first: ranks that submit together meet within it, and an
#: idle round every 20 ms spends at most 1% of a core here.
SPIN_S = 200e-6
#: Longest single sleep between tests.
MAX_SLEEP_S = 1e-3
#: A sleep is at most this fraction of the time waited so far (the latency it can add).
SLEEP_FRACTION = 0.125


#: Requests a failure left incomplete. An ``MPI.Request`` keeps the buffers it was started with
#: alive; dropped, it would let them be freed while MPI may still write into them (a collective on
#: a communicator that a peer's death or a revocation aborted), so they are kept until exit.
ABANDONED: List[Any] = []


def keep_unfinished(requests) -> None:
    """Keep in :data:`ABANDONED` each of ``requests`` that has not completed, as its owner lets go
    of them. mpi4py frees a pending request whose object is dropped (``MPI_Request_free``), and a
    freed send that then fails (its peer died, its communicator was revoked) has no request left
    to report to: Open MPI reports it on no communicator, where errors are fatal, and that aborts
    the whole job, survivors included. A test that raises has completed the request in error,
    save an any-source receive told of a failure (ULFM's ``ERR_PROC_FAILED_PENDING``), which is
    still pending."""
    from mpi4py import MPI

    pending = getattr(MPI, "ERR_PROC_FAILED_PENDING", None)
    for request in requests:
        try:
            done = request.Test()
        except MPI.Exception as error:
            done = error.Get_error_class() != pending
        if not done:
            ABANDONED.append(request)


def wait(request, wake=None,
         failure: Optional[Callable[[], Optional[BaseException]]] = None) -> None:
    """Complete ``request`` (an ``MPI.Request``), testing it with growing sleeps in between
    (see :func:`until`). Should ``failure`` end the wait, the request is kept (:data:`ABANDONED`)."""
    try:
        until(request.Test, wake, failure)
    except BaseException:
        ABANDONED.append(request)
        raise


def until(test: Callable[[], Any], wake=None, failure: Optional[Callable[[], Optional[BaseException]]] = None,
          spin_s: float = SPIN_S, clock: Callable[[], float] = time.perf_counter,
          sleep: Callable[[float], Any] = time.sleep):
    """Call ``test`` until it returns something true, and return that; growing sleeps between
    once ``spin_s`` has passed.

    ``wake`` (a ``threading.Event`` or a :class:`blinkflow.runtime.doorbell.Doorbell`) is set when this rank has
    new work: peers usually have theirs at about the same moment, so the round is about to
    complete and the sleeps start small again. (It stays set until the background thread drains
    the work, so it shortens the sleeps once, not forever.)
    ``failure`` is asked between sleeps; an error it returns (a peer found dead by the watchdog,
    whose part of the request may never come) is raised instead of waiting on.
    ``clock`` and ``sleep`` are the time it reads and the pause it takes without ``wake``; tests
    pass a fake pair to check the sleeps asked for without depending on the scheduler.
    """
    found = test()
    if found:
        return found
    start = clock()
    while True:
        found = test()
        if found:
            return found
        waited = clock() - start
        if waited <= spin_s:
            # Give the core to a runnable thread while spinning, as MPI does when ranks
            # outnumber cores: the peer this waits for may be the one that needs it (4 ranks on
            # 2 cores, 200 x 16 KiB: 2.02 ms spinning, 1.79 ms yielding). With a core to spare
            # it returns at once.
            _yield()
            continue
        error = failure() if failure is not None else None
        if error is not None:
            raise error
        pause = min(MAX_SLEEP_S, waited * SLEEP_FRACTION)
        if wake is None:
            sleep(pause)
        elif wake.wait(pause):
            wake = None
            start = clock()
