"""Proving a schedule before it first runs, remembered by digest.

:meth:`Programs.schedule <blinkflow.schedule.cache.Programs.schedule>` asks for a proof of every
new call shape when ``BLINKFLOW_CHECK_SCHEDULES=1``: the collective's postcondition by symbolic
execution (:mod:`.symbolic`) and the deadlock-freedom of the device executor's tables
(:mod:`.deadlock`). The proof depends only on the schedule and the table parameters, so with
``BLINKFLOW_CHECK_CACHE`` naming a folder a proof is done once for all the processes that share
it (the test suite's launches prove the same schedules again and again): a proven schedule
leaves an empty file named by its digest there, and a schedule whose file exists is not proven
again. Only proofs that held are written, so a schedule that fails fails in every process.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from typing import Mapping, Optional

from .ir import Schedule

#: Most steps (all devices together) of a schedule whose postcondition is proven symbolically:
#: that proof costs about a millisecond per hundred steps on every rank, and a large buffer in
#: small chunks (the tests' 40 MiB in 4 KiB chunks: 10^5 steps) is the same plan, proven at the
#: sizes below this, cut finer. The device tables' deadlock check has no such limit: it is
#: event-driven (linear in the steps) and runs on every shape.
CHECK_STEP_LIMIT = 20_000


def digest(schedule: Schedule, window: int, fuse_inputs: int, rank_of: Mapping[int, int]) -> str:
    """What a proof depends on, hashed: the schedule and the device tables' parameters."""
    what = (schedule, window, fuse_inputs, tuple(sorted(rank_of.items())))
    return hashlib.sha256(pickle.dumps(what, protocol=4)).hexdigest()


def prove(schedule: Schedule, window: int, fuse_inputs: int, rank_of: Mapping[int, int],
          folder: Optional[str] = None) -> None:
    """Raise ScheduleError unless ``schedule`` computes its collective and its device tables
    (``window`` slots per connection) cannot deadlock; skipped for a schedule ``folder`` holds
    as proven, and remembered there once proven."""
    from .deadlock import check_schedule
    from .symbolic import check

    key = digest(schedule, window, fuse_inputs, rank_of) if folder else None
    if key is not None and os.path.exists(os.path.join(folder, key)):
        return
    if sum(len(steps) for _, steps in schedule.programs) <= CHECK_STEP_LIMIT:
        check(schedule)
    check_schedule(schedule, window, fuse_inputs, rank_of)
    if key is not None:
        _remember(folder, key)


def _remember(folder: str, key: str) -> None:
    """Create ``folder/key`` whole or not at all (processes prove the same schedule at once)."""
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".proving-")
    os.close(fd)
    os.replace(tmp, os.path.join(folder, key))
