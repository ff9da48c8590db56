"""``init()`` within a deadline: every rank arrives, and every rank hears of one that fails.

Two dangers of a collective start: a rank that never calls ``init()`` leaves the others inside
its first collective forever, and a rank whose set-up fails alone (a timeline path that is a
directory, a backend that cannot load) skips collectives the others then wait in. So:

1. **Arrival census**, before any collective: each rank tells rank 0 it is here (a small
   point-to-point message on the caller's communicator, tag ``MPI_TAG_UB``, every message
   consumed); rank 0 acknowledges at once and, when all are here or ``start_timeout`` seconds
   after its own call, tells each present rank the verdict. A rank not acknowledged within
   ``start_timeout`` (rank 0 missing) or told of missing ranks raises :class:`InitError` naming
   them. Collectives start only when every rank is known to be there.
2. **Set-up under watch**: a rank whose set-up fails sends a notice on the side channel
   (:mod:`.side_channel`) before it raises; the others' user threads, waiting for their
   background threads to finish set-up, receive it and raise InitError naming that rank and
   its error, or raise after ``start_timeout`` seconds more. (Their background threads stay
   inside a collective that cannot complete: the process is marked broken and leaves with
   status 1 at exit, see ``lifecycle._exit_hook``.)
"""
from __future__ import annotations

import time
import warnings
from typing import List, Optional

from ..backends import quiet_wait, teardown
from ..config import Config, unknown_variables
from ..errors import ConfigError, ConfigWarning, InitError, PlanError, ProcessSetError, TopologyError
from .side_channel import SideChannel, open_side_channel

#: Errors the set-up raises on every rank alike (the agreements of ``job.discover``, process sets
#: refused or failed at init): no rank is
#: left inside a collective after them.
AGREED_ERRORS = (ConfigError, PlanError, TopologyError, ProcessSetError)
_POLL_S = 0.02
NOTICE_GRACE_S = 1.0
VERDICT_SLACK_S = 2.0


def _pause(since: float) -> None:
    """Sleep between tests: short at first (ranks usually arrive together), up to _POLL_S."""
    time.sleep(min(_POLL_S, max(0.0005, (time.monotonic() - since) / 8)))


def arrive(base, config: Config) -> SideChannel:
    """The arrival census over ``base`` (the communicator ``init`` was given); returns the
    side channel, opened once every rank is known to be here. Raises InitError otherwise."""
    rank, size = base.Get_rank(), base.Get_size()
    timeout = config.start_timeout
    if size > 1:
        tag = _census_tag(base)
        (_count_arrivals if rank == 0 else _report_arrival)(base, rank, size, tag, timeout)
    if rank == 0:
        for line in unknown_variables():
            warnings.warn(line, ConfigWarning, stacklevel=4)
    return open_side_channel(base)


def _census_tag(base) -> int:
    from mpi4py import MPI

    return int(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB))  # defined on the world communicator, valid on all


def _count_arrivals(base, rank: int, size: int, tag: int, timeout: float) -> None:
    arrivals = {r: base.irecv(source=r, tag=tag) for r in range(1, size)}
    here: List[int] = [0]
    acks = []
    start = time.monotonic()
    end = start + timeout
    while len(here) < size and time.monotonic() < end:
        for r, request in list(arrivals.items()):
            done, _ = request.test()
            if done:
                here.append(r)
                del arrivals[r]
                acks.append(base.isend("here", dest=r, tag=tag))
        if len(here) < size:
            _pause(start)
    missing = sorted(arrivals)
    for request in arrivals.values():
        teardown.cancel(request)
    sends = acks + [base.isend(missing, dest=r, tag=tag) for r in here if r != 0]
    _wait_all(sends, timeout)
    if missing:
        raise InitError(f"blinkflow.init(): {_ranks(missing)} did not reach init() within {timeout:g} s of rank 0 "
                        f"(BLINKFLOW_START_TIMEOUT, blinkrun --start-timeout); ranks {sorted(here)} did. Every rank "
                        "must call init(): look for an error or a hang before it on those ranks, or raise the "
                        "timeout if they start slowly", missing)


def _report_arrival(base, rank: int, size: int, tag: int, timeout: float) -> None:
    sent = base.isend(rank, dest=0, tag=tag)
    ack = _receive(base, tag, timeout)
    if ack is None:
        raise InitError(f"blinkflow.init(): rank 0 did not reach init() within {timeout:g} s of rank {rank} "
                        "(BLINKFLOW_START_TIMEOUT, blinkrun --start-timeout). Every rank must call init(): look for "
                        "an error or a hang before it on rank 0, or raise the timeout if it starts slowly", [0])
    # Rank 0 decides at most `timeout` after its own call, which came before its acknowledgement.
    missing = _receive(base, tag, timeout + VERDICT_SLACK_S)
    _wait_all([sent], timeout)
    if missing is None:
        raise InitError(f"blinkflow.init(): rank 0 acknowledged rank {rank} but sent no verdict within "
                        f"{timeout:g} s; rank 0 is stuck or gone", [0])
    if missing:
        raise InitError(f"blinkflow.init(): {_ranks(missing)} did not reach init() within {timeout:g} s of rank 0 "
                        "(BLINKFLOW_START_TIMEOUT, blinkrun --start-timeout). Every rank must call init(): look "
                        "for an error or a hang before it on those ranks, or raise the timeout if they start slowly",
                        missing)


def _receive(base, tag: int, timeout: float):
    request = base.irecv(source=0, tag=tag)
    start = time.monotonic()
    end = start + timeout
    while time.monotonic() < end:
        done, message = request.test()
        if done:
            return message
        _pause(start)
    teardown.cancel(request)
    return None


def wait_for_setup(side: SideChannel, ready, config: Config) -> None:
    """Wait until ``ready`` (a threading.Event the background thread sets when its set-up
    ended, well or not); raise InitError when another rank's set-up failed (its notice) or
    when ``start_timeout`` seconds pass."""
    timeout = config.start_timeout
    end = time.monotonic() + timeout
    while not ready.wait(0.05):
        notice = side.poll_notice() if side.concurrent else None
        # An error every rank raises alike reaches the others' notices about when their own set-up
        # raises it: a moment's grace lets each rank raise its own (the same on every rank).
        if notice is not None and not ready.wait(NOTICE_GRACE_S):
            rank = int(notice.get("cause", notice.get("rank", -1)))
            raise InitError(f"blinkflow.init() failed on rank {rank}: {notice.get('text', '?')}", [rank])
        if time.monotonic() > end:
            raise InitError(f"blinkflow.init(): every rank arrived, but set-up did not finish within {timeout:g} s "
                            "(BLINKFLOW_START_TIMEOUT) and no rank reported a failure: some rank is stuck in "
                            "topology probing, planning or backend set-up")


def tell_setup_failed(side: Optional[SideChannel], error: BaseException) -> None:
    """This rank's set-up failed: tell the others, who may be waiting for it inside a collective
    (also for errors every rank raises alike: a type says too little to be sure)."""
    if side is not None:
        side.tell_all(f"{type(error).__name__}: {error}")


def leaves_peers_waiting(error: BaseException) -> bool:
    """Whether an init failure may leave this rank's MPI state inside an unfinished collective
    (then MPI_Finalize could wait forever, and the process must not call it)."""
    return not isinstance(error, AGREED_ERRORS)


def _wait_all(requests, timeout: float) -> None:
    """Complete ``requests`` (the census's sends) within the timeout (5 s at most); those still
    pending then are kept until exit, never freed (:func:`..backends.quiet_wait.keep_unfinished`)."""
    start = time.monotonic()
    end = start + min(timeout, 5.0)
    pending = list(requests)
    while pending and time.monotonic() < end:
        pending = [r for r in pending if not r.Test()]
        if pending:
            _pause(start)
    quiet_wait.keep_unfinished(pending)


def _ranks(ranks: List[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
