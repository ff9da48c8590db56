"""The cache folder of the op libraries (:mod:`._op_library`): what may be loaded from it, and
what a killed build left in it.

A library loaded into the process runs as this user, so it must be one only this user could
have written: a regular file (not a link) owned by this user that neither its group nor others
may write, in a folder owned by this user that only this user may enter (0700; made so when
created, and made so again when it is this user's). Anything else is removed and built again.

A build writes ``<library>.tmp-<host>-<pid>-<random>.so`` and renames it into place; a build
killed before the rename leaves that file. The next build removes those of this host whose
process is gone, and those of any host older than :data:`LEFTOVER_AGE_S` (a cache folder on a
shared file system is written by several hosts; a build takes minutes at most). Older builds
named their temporary file ``tmpXXXXXXXX.so``, without host or process; those are removed once
they are as old.
"""
from __future__ import annotations

import os
import re
import socket
import stat
import tempfile
import time

LEFTOVER_AGE_S = 3600.0
_TEMPORARY = re.compile(r".*\.tmp-(?P<host>.+)-(?P<pid>[0-9]+)-[^-]*\.so|tmp[A-Za-z0-9_]{8}\.so")


def private_folder(folder: str) -> str:
    """``folder``, created 0700 or made so; OSError saying what to do when it is another user's."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise OSError(f"blinkflow's cache folder {folder} is not a folder of this user (uid {os.geteuid()}); "
                      "remove it, or point XDG_CACHE_HOME at a folder of your own")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder


def trusted(path: str) -> bool:
    """Whether ``path`` is a library this process may load: a regular file of this user that
    neither its group nor others may write."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def remove_untrusted(path: str) -> None:
    """Remove what is at ``path`` (a library that may not be loaded), to build it afresh."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def temporary_path(target: str) -> str:
    """A new empty file (0600) beside ``target`` for a build of it, named after this host and
    process so that :func:`remove_leftovers` can tell whether its build still runs."""
    fd, path = tempfile.mkstemp(prefix=f"{os.path.basename(target)[:-3]}.tmp-{socket.gethostname()}-{os.getpid()}-",
                                suffix=".so", dir=os.path.dirname(target))
    os.close(fd)
    return path


def remove_leftovers(folder: str, now: float = None) -> list:
    """Remove the temporary files of builds that ended without renaming them; their names."""
    now = time.time() if now is None else now
    host = socket.gethostname()
    removed = []
    for name in os.listdir(folder):
        match = _TEMPORARY.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(folder, name)
        try:
            old = now - os.lstat(path).st_mtime > LEFTOVER_AGE_S
        except FileNotFoundError:
            continue
        if old or (match.group("host") == host and not _alive(int(match.group("pid") or 0))):
            try:
                os.remove(path)
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        return True
    return True
