"""Proving a schedule before it first runs, remembered by digest.

:meth:`Programs.schedule <blinkflow.schedule.cache.Programs.schedule>` asks for a proof of every
new call shape when ``BLINKFLOW_CHECK_SCHEDULES=1``: the collective's postcondition by symbolic
execution (:mod:`.symbolic`) and the deadlock-freedom of the device executor's tables
(:mod:`.deadlock`). The proof depends only on the schedule and the table parameters, so with
``BLINKFLOW_CHECK_CACHE`` naming a folder a proof is done once for all the processes that share
it (the test suite's launches prove the same schedules again and again): a proven schedule
leaves an empty file named by its digest there, and a schedule whose file exists is not proven
again. Only proofs that held are written, so a schedule that fails fails in every process. The
ranks of a job meet each new shape together: one claims the proof and the others wait for it
(while the claimant lives), rather than every rank proving the same schedule at once.

The test suite is this module's heaviest user, but it ships: ``BLINKFLOW_CHECK_SCHEDULES`` and
``BLINKFLOW_CHECK_CACHE`` are user settings (docs/configuration.md), and a job run with them has
the same many ranks meeting the same shapes; the claim protocol is what keeps them from proving
one schedule once per rank.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import socket
import tempfile
import time
from typing import Mapping, Optional

from ..processes import pid_alive
from .ir import Schedule

#: Most steps (all devices together) of a schedule whose postcondition is proven symbolically:
#: that proof costs about a millisecond per hundred steps on every rank, and a large buffer in
#: small chunks (the tests' 40 MiB in 4 KiB chunks: 10^5 steps) is the same plan, proven at the
#: sizes below this, cut finer. The device tables' deadlock check has no such limit: it is
#: event-driven (linear in the steps) and runs on every shape.
CHECK_STEP_LIMIT = 20_000
#: Longest wait for another process's proof of the same schedule before proving it here.
CLAIM_WAIT_S = 60.0


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
    claim = None
    if key is not None:
        if os.path.exists(os.path.join(folder, key)):
            return
        claim = _claim(folder, key)
        if claim is None and _proven_elsewhere(folder, key):
            return
    try:
        if sum(len(steps) for _, steps in schedule.programs) <= CHECK_STEP_LIMIT:
            check(schedule)
        check_schedule(schedule, window, fuse_inputs, rank_of)
        if key is not None:
            _remember(folder, key)
    finally:
        if claim is not None:
            os.unlink(claim)


def _claim(folder: str, key: str) -> Optional[str]:
    """The path of this process's claim to prove ``key`` (``folder/key.claim``, holding its host
    and pid), or None when another process holds it."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, key + ".claim")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return None
    with os.fdopen(fd, "w") as f:
        f.write(f"{socket.gethostname()} {os.getpid()}")
    return path


def _proven_elsewhere(folder: str, key: str) -> bool:
    """Wait for the claimant's proof of ``key``: True once it is remembered; False when the claim
    ends without it (the proof failed there, and must fail here too), its claimant on this host
    is gone, or :data:`CLAIM_WAIT_S` passed."""
    proof, claim = os.path.join(folder, key), os.path.join(folder, key + ".claim")
    deadline = time.monotonic() + CLAIM_WAIT_S
    while time.monotonic() < deadline:
        if os.path.exists(proof):
            return True
        try:
            with open(claim) as f:
                host, _, pid = f.read().partition(" ")
        except FileNotFoundError:
            return os.path.exists(proof)
        if host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid)):
            return False
        time.sleep(0.01)
    return False


def _remember(folder: str, key: str) -> None:
    """Create ``folder/key`` whole or not at all (processes prove the same schedule at once)."""
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".proving-")
    os.close(fd)
    os.replace(tmp, os.path.join(folder, key))
