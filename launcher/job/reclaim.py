"""Reclaim what dead jobs left behind on this machine, at the next start.

A process killed with SIGKILL runs no clean-up: blinkrun's and its wrappers' scratch folders
stay in the temp folder, and when mpirun dies with its ranks, Open MPI's shared-memory segments
(``/dev/shm/sm_segment.<host>.<uid>.<job>.<rank>``, 16 MiB each) and its session folder
(``<tmp>/ompi.<mpirun pid>``) stay too. Each start of blinkrun, and of the first wrapper on
every host, removes those of this user that no live process can still be using:

* scratch folders carry their creator's pid in their name (``blinkrun-<pid>-*``,
  ``blinkrun-rank<r>-<pid>-*``): removed when that pid is gone;
* a session folder ``ompi.<pid>`` is removed when that mpirun pid is gone;
* a segment is removed when no live process maps or holds it open and it is older than a
  minute (a job creating its segments right now has not mapped them yet).

Every step is best effort (another start may reclaim the same file at once) and never touches
another user's files.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from typing import Callable, Iterable, List, Optional, Set

from blinkflow.processes import pid_alive

SCRATCH = re.compile(r"^blinkrun-(?:rank\d+-)?(\d+)-")
SESSION = re.compile(r"^ompi\.(\d+)$")
SEGMENT = re.compile(r"^sm_segment\.")
SEGMENT_MIN_AGE_S = 60.0


def scratch_prefix(rank: Optional[int] = None) -> str:
    """The prefix of a scratch folder of this process (its pid makes it reclaimable)."""
    who = "" if rank is None else f"rank{rank}-"
    return f"blinkrun-{who}{os.getpid()}-"


def stale_folders(folder: str, pattern, alive: Callable[[int], bool] = pid_alive) -> List[str]:
    """Folders in ``folder`` of this user whose name matches ``pattern`` (group 1: a pid) and
    whose pid is gone."""
    out = []
    for entry in _entries(folder):
        match = pattern.match(entry.name)
        if match and _mine(entry) and entry.is_dir(follow_symlinks=False) and not alive(int(match.group(1))):
            out.append(entry.path)
    return out


def stale_segments(folder: str, in_use: Set[str], now: Optional[float] = None,
                   min_age_s: float = SEGMENT_MIN_AGE_S) -> List[str]:
    """Open MPI segments in ``folder`` of this user that no process uses (``in_use``: real paths
    mapped or open by live processes) and older than ``min_age_s``."""
    now = time.time() if now is None else now
    out = []
    for entry in _entries(folder):
        if SEGMENT.match(entry.name) and _mine(entry) and entry.is_file(follow_symlinks=False):
            if os.path.realpath(entry.path) not in in_use and now - entry.stat().st_mtime >= min_age_s:
                out.append(entry.path)
    return out


def files_in_use(prefix: str, proc: str = "/proc") -> Optional[Set[str]]:
    """Real paths under ``prefix`` that this user's live processes map or hold open; None where
    there is no /proc. Processes whose maps cannot be read are skipped: only non-dumpable ones
    (a sandbox's init, set-uid programs), never an MPI rank."""
    if not os.path.isdir(proc):
        return None
    uid = os.geteuid()
    used: Set[str] = set()
    for pid in _entries(proc):
        if not pid.name.isdigit():
            continue
        try:
            if os.stat(pid.path).st_uid != uid:
                continue
            with open(os.path.join(pid.path, "maps")) as f:
                for line in f:
                    at = line.find(prefix)
                    if at >= 0:
                        used.add(line[at:].rstrip("\n").replace(" (deleted)", ""))
            for fd in _entries(os.path.join(pid.path, "fd")):
                target = os.readlink(fd.path)
                if target.startswith(prefix):
                    used.add(target)
        except OSError:  # it ended meanwhile, or is not dumpable
            continue
    return used


def reclaim(tmp: Optional[str] = None, shm: str = "/dev/shm") -> List[str]:
    """Remove what dead jobs of this user left here; returns what was removed."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    for path in stale_folders(tmp, SCRATCH) + stale_folders(tmp, SESSION):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    segments = [e for e in _entries(shm) if SEGMENT.match(e.name)]
    if segments:  # reading every process's maps costs; only when there is something to judge
        in_use = files_in_use(os.path.realpath(shm) + "/")
        if in_use is not None:
            for path in stale_segments(shm, in_use):
                try:
                    os.unlink(path)
                    removed.append(path)
                except OSError:
                    pass
    return removed


def quietly_reclaim() -> None:
    """:func:`reclaim`, never failing the start it runs in."""
    try:
        reclaim()
    except Exception:  # noqa: BLE001 - housekeeping must not stop a job from starting
        pass


def _entries(folder: str) -> Iterable[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _mine(entry: os.DirEntry) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_uid == os.geteuid()
    except OSError:
        return False
